"""Plots (matplotlib, PNG). Imported only when a plot is asked for."""
from __future__ import annotations

import numpy as np

from normdiff.harness.compare import DISAGREEING

SCALES = np.logspace(-5, 1, 13)  # input RMS sweep for the eps bugs
BF16_FLOOR = 2.0e-3  # rel_l2 of a correct bf16 pipeline (CATALOGUE.md: 1.7e-3 to 2.3e-3)


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ValueError("plots need matplotlib: pip install 'normdiff[plot]'") from None
    return plt


def plot_bug(bug, report, path: str) -> str:
    """The mutant's error against the input regime: a sweep over input RMS for bugs that tiny
    inputs expose, otherwise its error per regime of the report's cases."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    if "tiny_rms" in bug.exposing_regimes:
        _rms_sweep(ax, bug)
    else:
        _per_regime(ax, report.results)
    ax.set_title(f"{bug.id}: {bug.op}@{bug.convention}")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _rms_sweep(ax, bug) -> None:
    from normdiff.cases.model import Case
    from normdiff.cases.suites import Suite
    from normdiff.harness import api, registry

    heads = (8, 64) if bug.op in ("qk_norm", "qk_norm_rope") else (1, 1024)
    for dtype in ("float32", "bfloat16"):
        cases = tuple(Case(bug.op, bug.convention, dtype, 8, heads[1], num_heads=heads[0],
                           regime=f"tiny_rms:{s:.3g}", weights="trained",
                           gate="open" if bug.op == "gated_rms_norm" else "") for s in SCALES)
        rows = api.run_suite(Suite("sweep", "", cases), [registry.get(bug.id)]).results.set_index("case_id")
        err = [rows.loc[c.id, "rel_l2"] for c in cases]
        ax.loglog(SCALES, err, marker="o", label=f"{bug.id} ({dtype})")
    ax.axhline(BF16_FLOOR, color="grey", linestyle="--", label="bf16 rounding floor of a correct norm")
    ax.set_xlabel("input RMS")
    ax.set_ylabel("relative L2 error vs the exact contract")
    ax.legend(fontsize=8)


def _per_regime(ax, results) -> None:
    worst = results.groupby("regime")["rel_l2"].max().sort_values()
    caught = results.groupby("regime")["outcome"].apply(lambda s: s.isin(DISAGREEING).any())
    colors = ["tab:red" if caught[r] else "tab:green" for r in worst.index]
    ax.barh(worst.index, worst.clip(lower=1e-8).values, color=colors)
    ax.set_xscale("log")
    ax.axvline(BF16_FLOOR, color="grey", linestyle="--")
    ax.set_xlabel("worst relative L2 error in the regime (red: caught, green: invisible)")


# ---- the report's plots (embedded in report.html and written to DIR/plots/) --------------------

REPORT_DPI = 100


def available() -> bool:
    """Whether matplotlib can be imported (without importing it)."""
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


def regime_errors(results, path=None):
    """The worst error of each non-mutant implementation per input regime, as a share of the ULP
    budget of the row (max_ulp / tolerance_ulp, log scale): above the line at 1 is outside the
    budget. One marker set per implementation, dodged sideways so that equal values stay visible."""
    import pandas as pd

    plt = _pyplot()
    rows = results[(results["kind"] != "mutant") & results["max_ulp"].notna()
                   & (results["tolerance_ulp"] > 0)]
    fig, ax = plt.subplots(figsize=(12, 4.6), dpi=REPORT_DPI, layout="constrained")
    if rows.empty:
        ax.text(0.5, 0.5, "no judged outputs", ha="center", va="center", transform=ax.transAxes)
        return _finish(fig, plt, path)
    share = (rows["max_ulp"] / rows["tolerance_ulp"]).clip(lower=1e-2)
    table = (rows.assign(share=share).groupby(["regime", "implementation"], observed=True)["share"].max()
             .unstack("implementation"))
    regimes = sorted(table.index, key=lambda r: (r != "normal", r))
    table = table.reindex(regimes)
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


def agreement_heatmap(report, path=None):
    """The pairwise matrices as heat maps: share of shared cases on which two implementations agree
    within the budget, and on which they are bit-identical."""
    plt = _pyplot()
    panels = [("agree within the ULP budget", report.agreement("agree")),
              ("bit-identical outputs", report.agreement("identical"))]
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
        _write_bytes(path, data)
    return data


def _write_bytes(path, data: bytes) -> None:
    import os
    from pathlib import Path

    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


REPORT_PLOTS = {"regime_errors": "Worst error per input regime",
                "agreement": "Agreement between implementations"}


def report_plots(report, out_dir=None) -> dict[str, bytes]:
    """The report's plots as PNG bytes by name (REPORT_PLOTS); also written to OUT_DIR/plots/NAME.png
    when `out_dir` is given. Raises ValueError when matplotlib is not installed."""
    from pathlib import Path

    folder = None
    if out_dir is not None:
        folder = Path(out_dir) / "plots"
        folder.mkdir(parents=True, exist_ok=True)
    where = (lambda name: folder / f"{name}.png") if folder else (lambda name: None)
    return {"regime_errors": regime_errors(report.results, where("regime_errors")),
            "agreement": agreement_heatmap(report, where("agreement"))}
