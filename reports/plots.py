"""Plots (matplotlib, PNG). Imported only when a plot is asked for.

Plots receive data, never a harness to run: the views (reports/views/) and `normdiff explain`
compute what is drawn and hand it over. Each plot returns its PNG bytes and also writes them to
`path` when one is given.

Figures are drawn on an Agg canvas without pyplot (nothing global to close). The report's plots
have no layout engine: constrained layout measures every tick label several times and makes
savefig draw the figure twice; `_place` measures each axes' labels once and sizes the figure
around them.
"""
from __future__ import annotations

import contextlib
import math
import os
import sys
from pathlib import Path

import numpy as np

from normdiff import processes
from normdiff.files import atomic_write
from normdiff.harness.data.errors import UsageError
from normdiff.reports.folder import writing
from normdiff.text import general, share

BF16_FLOOR = 2.0e-3  # rel_l2 of a correct bf16 pipeline (CATALOGUE.md: 1.7e-3 to 2.3e-3)


def _figure(figsize=None, dpi=None):
    """A figure on its own Agg canvas."""
    Figure, FigureCanvasAgg = _matplotlib()
    fig = Figure(figsize=figsize, dpi=dpi)
    FigureCanvasAgg(fig)
    return fig


def _matplotlib():
    """matplotlib's Figure and Agg canvas (and the modules the plots use), imported."""
    try:
        import matplotlib.ticker  # noqa: F401  (the regime plot's axis)
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise UsageError("plots need matplotlib: pip install 'normdiff[plot]'") from None
    return Figure, FigureCanvasAgg


_SETTINGS_PREFIX = "normdiff-matplotlib-"


@contextlib.contextmanager
def settings_folder():
    """Around drawing: matplotlib's own config and cache folders when they can be written (its font
    cache, kept between runs), else a temporary one, removed at the end (HOME read-only or missing:
    matplotlib would make one itself, warn on stderr despite -q, and leave it in TMPDIR when a forked
    child draws). Nothing to do once matplotlib is imported: it has chosen its folders."""
    if os.environ.get("MPLCONFIGDIR") or "matplotlib" in sys.modules or _defaults_writable():
        yield
        return
    import shutil
    import tempfile

    processes.remove_orphaned(tempfile.gettempdir(), _SETTINGS_PREFIX)  # a SIGKILLed run's
    try:
        folder = tempfile.mkdtemp(prefix=f"{_SETTINGS_PREFIX}{os.getpid()}-")
    except OSError:  # no temporary folder either: matplotlib says so itself
        yield
        return
    before = os.environ.get("MPLCONFIGDIR")
    os.environ["MPLCONFIGDIR"] = folder
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("MPLCONFIGDIR", None)
        else:
            os.environ["MPLCONFIGDIR"] = before
        shutil.rmtree(folder, ignore_errors=True)


def _defaults_writable() -> bool:
    """Whether matplotlib's default config and cache folders can be made and written (its own test,
    matplotlib.get_configdir, without importing it)."""
    try:
        if sys.platform.startswith(("linux", "freebsd")):
            folders = [Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config", "matplotlib"),
                       Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", "matplotlib")]
        else:
            folders = [Path.home() / ".matplotlib"]
        for folder in folders:
            folder.mkdir(parents=True, exist_ok=True)
            if not (folder.is_dir() and os.access(folder, os.W_OK)):
                return False
    except (OSError, RuntimeError):  # RuntimeError: no home folder at all
        return False
    return True


def _colormap(name: str):
    import matplotlib

    return matplotlib.colormaps[name]


def plot_bug(title: str, sweep: dict | None, per_regime, path, blocks: dict | None = None) -> bytes:
    """A bug's error against the input regime: `sweep` ({label: (input rms values, rel_l2 values)})
    for bugs that tiny inputs expose, otherwise `per_regime` (regime -> (worst rel_l2, caught)).
    A quantizing bug's `blocks` add a panel: each block's dequantized error against its amax
    ({"xlabel", "max": the x of the format's max or None, "mutant": (x, error), "contract": (x, error)},
    harness/analysis/quant_explain.amax_points)."""
    with settings_folder():
        return _plot_bug(title, sweep, per_regime, path, blocks)


def _plot_bug(title: str, sweep: dict | None, per_regime, path, blocks: dict | None = None) -> bytes:
    fig = _figure((12, 4.2) if blocks else (7, 4.2), 110)
    ax = fig.add_subplot(1, 2, 1) if blocks else fig.add_subplot()
    if sweep:
        for label, (scales, errors) in sweep.items():
            ax.loglog(scales, errors, marker="o", label=label)
        ax.axhline(BF16_FLOOR, color="grey", linestyle="--", label="bf16 rounding floor of a correct norm")
        ax.set_xlabel("input RMS")
        ax.set_ylabel("relative L2 error vs the exact contract")
        ax.legend(fontsize=8)
    else:
        regimes = list(per_regime)
        errors = [max(per_regime[r][0], 1e-8) for r in regimes]
        colors = ["tab:red" if per_regime[r][1] else "tab:green" for r in regimes]
        ax.barh(regimes, errors, color=colors)
        ax.set_xscale("log")
        if not blocks:  # (a quantizing bug's error is its format's, not bf16's)
            ax.axvline(BF16_FLOOR, color="grey", linestyle="--")
        ax.set_xlabel("worst relative L2 error in the regime (red: caught, green: invisible)")
    ax.set_title(title)
    if blocks:
        _amax_panel(fig.add_subplot(1, 2, 2), blocks)
    fig.tight_layout()
    return _finish(fig, path)


def _amax_panel(ax, blocks: dict) -> None:
    """Each block's dequantized error (q * scale against the exact y), the mutant's and the
    contract's, against where its amax lands (plot_bug's `blocks`)."""
    floor = 1e-8  # an exact block (error 0) drawn at the bottom of the log axis
    for label, color, marker in (("contract", "tab:green", "o"), ("mutant", "tab:red", "x")):
        x, error = blocks[label]
        ax.scatter(x, np.maximum(np.nan_to_num(np.asarray(error, dtype=float), nan=floor), floor), s=10,
                   color=color, marker=marker, label=label, alpha=0.6)
    if blocks.get("max") is not None:
        ax.axvline(blocks["max"], color="grey", linestyle="--", label="the format's max")
    ax.set_yscale("log")
    if "amax /" not in blocks["xlabel"]:
        ax.set_xscale("log")
    ax.set_xlabel(blocks["xlabel"])
    ax.set_ylabel("block's relative error of q * scale")
    ax.set_title("each block's error against where its amax lands")
    ax.legend(fontsize=8)


# ---- the report's plots (embedded in report.html and written to DIR/plots/) --------------------

REPORT_DPI = 100
EDGE = 0.1  # inches of white around everything a report plot draws
GAP = 0.3  # inches between the labels of one box and the next
CELL = 0.2  # inches per implementation on the heat maps' sides (a 7-point label per row)


def load() -> None:
    """Import what drawing needs (matplotlib's Figure and Agg canvas), so that children forked
    afterwards share it; a plot without matplotlib says so when it is drawn."""
    try:
        _matplotlib()
    except UsageError:
        pass


def available() -> bool:
    """Whether matplotlib can be imported (without importing it)."""
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


def regime_errors(table, path=None):
    """`table`: regime x implementation, the worst max_ulp / tolerance_ulp (views/errors.py), drawn
    on a log scale: above the line at 1 is outside the budget. One marker set per implementation,
    dodged sideways so that equal values stay visible."""
    fig = _figure(dpi=REPORT_DPI)
    ax = fig.add_axes((0, 0, 1, 1))  # placed once its labels are measured
    if table is None or table.empty:
        ax.text(0.5, 0.5, "no judged outputs", ha="center", va="center", transform=ax.transAxes)
        _place(fig, [(ax, 9.0, 3.4)])
        return _finish(fig, path)
    regimes = list(table.index)
    names = list(table.columns)
    cmap = _colormap("tab20")
    markers = "osD^v<>pPX*h"
    width = 0.6
    for i, name in enumerate(names):
        x = np.arange(len(regimes), dtype=float) + (i - (len(names) - 1) / 2) * width / max(len(names), 1)
        y = table[name].to_numpy()
        ax.plot(x, y, linestyle="none", marker=markers[i % len(markers)], markersize=5,
                color=cmap(i % 20), label=name)
    ax.axhline(1.0, color="tab:red", linestyle="--", linewidth=1.2, label="ULP budget")
    ax.set_yscale("log")
    ax.set_xticks(range(len(regimes)))
    ax.set_xticklabels(regimes, rotation=35, ha="right", fontsize=8)
    ax.set_xlim(-0.6, len(regimes) - 0.4)
    ax.set_ylabel("worst max ULP / ULP budget")
    ax.set_title("Worst error per input regime, as a multiple of each case's ULP budget (every op and dtype)",
                 fontsize=10)
    top = float(np.nanmax(table.to_numpy(dtype=float)))
    bottom = min(0.05, float(np.nanmin(table.to_numpy(dtype=float))) / 1.5)
    ax.set_ylim(bottom=bottom, top=max(3.0, top * 3.0))
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    decades = np.log10(max(3.0, top * 3.0) / bottom)
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0) if decades <= 4 else (1.0,)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: general(v)))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.grid(axis="y", which="major", alpha=0.3)
    _place(fig, [(ax, 9.0, 3.4)], legend={"fontsize": 7, "frameon": False})
    return _finish(fig, path)


def agreement_heatmap(matrices, path=None):
    """`matrices`: (agree, identical), the pairwise matrices (views/agreement.py), as heat maps:
    share of shared cases on which two implementations agree within the budget, and on which they
    are bit-identical."""
    agree, identical = matrices
    panels = [("agree within the ULP budget", agree), ("bit-identical outputs", identical)]
    n = max((len(m) for _, m in panels), default=0)
    side = min(max(3.0, CELL * n), 7.0)  # each panel's square, inches
    fig = _figure(dpi=REPORT_DPI)
    axes = [fig.add_axes((0, 0, 1, 1)) for _ in panels]  # placed once their labels are measured
    cmap = _colormap("RdYlGn").with_extremes(bad="#e5e7eb")  # grey: a pair that shares no case
    image = None
    for ax, (title, matrix) in zip(axes, panels):
        ax.set_title(f"share of shared cases: {title}", fontsize=10)
        if matrix.empty:
            ax.text(0.5, 0.5, "no pairs", ha="center", va="center", transform=ax.transAxes)
            ax.set_axis_off()
            continue
        values = matrix.to_numpy(dtype=float)
        image = ax.imshow(values, vmin=0.0, vmax=1.0, cmap=cmap, aspect="equal")
        ax.set_xticks(range(len(matrix.columns)))
        ax.set_xticklabels(matrix.columns, rotation=60, ha="right", fontsize=7)
        ax.set_yticks(range(len(matrix.index)))
        ax.set_yticklabels(matrix.index, fontsize=7)
        if n <= 24:
            for (i, j), v in _cells(values):
                if v == v:  # not NaN (a pair that shares no case)
                    ax.text(j, i, share(v) if v < 1 else "all", ha="center", va="center", fontsize=6,
                            color="white" if v < 0.2 or v > 0.85 else "black")
    boxes = [(ax, side, side) for ax in axes]
    if image is not None:
        bar = fig.add_axes((0, 0, 1, 1))
        fig.colorbar(image, cax=bar, format=lambda v, _: share(v))
        boxes.append((bar, 0.2, 0.8 * side))
    _place(fig, boxes)
    return _finish(fig, path)


def _cells(values):
    for i in range(values.shape[0]):
        for j in range(values.shape[1]):
            yield (i, j), values[i, j]


def _place(fig, boxes, legend: dict | None = None) -> None:
    """Set `boxes` ((axes, frame width, frame height), inches) left to right, their frames centred
    on one line, each with room for what it draws around its frame (tick labels, axis labels,
    title); then, top-aligned, a figure legend of the style `legend` when given; and size the
    figure to fit. Each axes is measured once, at its frame size (where it sits does not matter)."""
    renderer = fig.canvas.get_renderer()
    reach = []
    for ax, width, height in boxes:
        around_w, around_h = width + 2 * EDGE, height + 2 * EDGE
        fig.set_size_inches(around_w, around_h)
        ax.set_position((EDGE / around_w, EDGE / around_h, width / around_w, height / around_h))
        reach.append(_reach(ax, renderer, fig.dpi))
    below, above = max(r[1] for r in reach), max(r[3] for r in reach)
    tallest = max(height for _, _, height in boxes)
    fig_height = EDGE + below + tallest + above + EDGE
    places, end = [], EDGE - GAP  # end: where the last box's labels end, inches
    for (ax, width, height), (left, _, right, _) in zip(boxes, reach):
        x = end + GAP + left
        places.append((ax, x, EDGE + below + (tallest - height) / 2, width, height))
        end = x + width + right
    if legend is not None:
        legend, legend_width = _legend(fig, renderer, fig_height - 2 * EDGE, legend)
        legend_left, end = end + GAP, end + GAP + legend_width
    fig_width = end + EDGE
    fig.set_size_inches(fig_width, fig_height)
    for ax, x, y, width, height in places:
        ax.set_position((x / fig_width, y / fig_height, width / fig_width, height / fig_height))
    if legend is not None:
        legend.set_bbox_to_anchor((legend_left / fig_width, 1 - EDGE / fig_height), transform=fig.transFigure)


def _reach(ax, renderer, dpi: float) -> tuple[float, float, float, float]:
    """How far (inches) what `ax` draws reaches beyond its frame: left, below, right, above."""
    frame = ax.get_window_extent(renderer)
    drawn = ax.get_tightbbox(renderer)
    return (max(frame.x0 - drawn.x0, 0.0) / dpi, max(frame.y0 - drawn.y0, 0.0) / dpi,
            max(drawn.x1 - frame.x1, 0.0) / dpi, max(drawn.y1 - frame.y1, 0.0) / dpi)


def _legend(fig, renderer, height: float, style: dict):
    """A figure legend of every labelled artist, in as few columns as keep it within `height`
    inches (a legend lays itself out once, so a taller one is made again); and its width."""
    dpi = fig.dpi
    columns = 1
    while True:
        legend = fig.legend(ncols=columns, loc="upper left", borderaxespad=0, **style)
        box = legend.get_window_extent(renderer)
        if box.height / dpi <= height or columns >= len(legend.get_texts()):
            return legend, box.width / dpi
        legend.remove()
        columns = max(columns + 1, math.ceil(columns * box.height / dpi / height))


def _finish(fig, path) -> bytes:
    """PNG bytes of the figure (also written to `path` when given). One draw makes the PNG; light
    compression keeps it fast."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", pil_kwargs={"compress_level": 3})
    data = buf.getvalue()
    if path is not None:
        with writing(path, "--plot"):  # refused (a full disk): an OutputError, an earlier plot kept
            atomic_write(path, data)
    return data
