"""Plots (matplotlib, PNG). Imported only when a plot is asked for.

Plots receive data, never a harness to run: the views (reports/views/) and `normdiff explain`
compute what is drawn and hand it over. Each plot returns its PNG bytes and also writes them to
`path` when one is given.
"""
from __future__ import annotations

import numpy as np

from normdiff.files import atomic_write
from normdiff.harness.data.errors import UsageError

BF16_FLOOR = 2.0e-3  # rel_l2 of a correct bf16 pipeline (CATALOGUE.md: 1.7e-3 to 2.3e-3)


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("plots need matplotlib: pip install 'normdiff[plot]'") from None
    return plt


def plot_bug(title: str, sweep: dict | None, per_regime, path) -> bytes:
    """A bug's error against the input regime: `sweep` ({label: (input rms values, rel_l2 values)})
    for bugs that tiny inputs expose, otherwise `per_regime` (regime -> (worst rel_l2, caught))."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
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
        ax.axvline(BF16_FLOOR, color="grey", linestyle="--")
        ax.set_xlabel("worst relative L2 error in the regime (red: caught, green: invisible)")
    ax.set_title(title)
    fig.tight_layout()
    return _finish(fig, plt, path)


# ---- the report's plots (embedded in report.html and written to DIR/plots/) --------------------

REPORT_DPI = 100


def available() -> bool:
    """Whether matplotlib can be imported (without importing it)."""
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


def regime_errors(table, path=None):
    """`table`: regime x implementation, the worst max_ulp / tolerance_ulp (views/errors.py), drawn
    on a log scale: above the line at 1 is outside the budget. One marker set per implementation,
    dodged sideways so that equal values stay visible."""
    import pandas as pd

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(12, 4.6), dpi=REPORT_DPI, layout="constrained")
    if table is None or table.empty:
        ax.text(0.5, 0.5, "no judged outputs", ha="center", va="center", transform=ax.transAxes)
        return _finish(fig, plt, path)
    regimes = list(table.index)
    names = list(table.columns)
    cmap = plt.get_cmap("tab20")
    markers = "osD^v<>pPX*h"
    width = 0.6
    for i, name in enumerate(names):
        x = pd.Series(range(len(regimes)), dtype=float) + (i - (len(names) - 1) / 2) * width / max(len(names), 1)
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
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.grid(axis="y", which="major", alpha=0.3)
    fig.legend(fontsize=7, ncol=1, loc="outside right upper", frameon=False)
    return _finish(fig, plt, path)


def agreement_heatmap(matrices, path=None):
    """`matrices`: (agree, identical), the pairwise matrices (views/agreement.py), as heat maps:
    share of shared cases on which two implementations agree within the budget, and on which they
    are bit-identical."""
    plt = _pyplot()
    agree, identical = matrices
    panels = [("agree within the ULP budget", agree), ("bit-identical outputs", identical)]
    n = max((len(m) for _, m in panels), default=0)
    side = min(max(4.0, 0.42 * n + 1.6), 9.0)
    fig, axes = plt.subplots(1, 2, figsize=(2 * side + 2.0, side), dpi=REPORT_DPI, layout="constrained")
    cmap = plt.get_cmap("RdYlGn").with_extremes(bad="#e5e7eb")  # grey: a pair that shares no case
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
                    ax.text(j, i, f"{v:.0%}" if v < 1 else "all", ha="center", va="center", fontsize=6,
                            color="white" if v < 0.2 or v > 0.85 else "black")
    if image is not None:
        fig.colorbar(image, ax=list(axes), shrink=0.8, format=lambda v, _: f"{v:.0%}")
    return _finish(fig, plt, path)


def _cells(values):
    for i in range(values.shape[0]):
        for j in range(values.shape[1]):
            yield (i, j), values[i, j]


def _finish(fig, plt, path) -> bytes:
    """PNG bytes of the figure (also written to `path` when given); closes the figure. The figures
    lay themselves out (constrained layout), so one draw makes the PNG; light compression keeps it fast."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", pil_kwargs={"compress_level": 3})
    plt.close(fig)
    data = buf.getvalue()
    if path is not None:
        atomic_write(path, data)
    return data
