"""Plots (matplotlib, PNG). Imported only when a plot is asked for."""
from __future__ import annotations

import numpy as np

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
    caught = results.groupby("regime")["outcome"].apply(lambda s: s.isin(("disagree", "nan_mismatch")).any())
    colors = ["tab:red" if caught[r] else "tab:green" for r in worst.index]
    ax.barh(worst.index, worst.clip(lower=1e-8).values, color=colors)
    ax.set_xscale("log")
    ax.axvline(BF16_FLOOR, color="grey", linestyle="--")
    ax.set_xlabel("worst relative L2 error in the regime (red: caught, green: invisible)")
