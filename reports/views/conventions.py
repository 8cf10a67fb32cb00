"""How the conventions themselves differ, measured on the same inputs.

Two correct implementations of different conventions (torch's F.normalize and Qwen3.5's l2norm,
OLMo2's full-vector QK-Norm and Qwen3's per-head one) never meet on a case, so the results table
cannot compare them. This view evaluates each pair of conventions' exact contracts on the suite's
inputs and reports, per input regime, how far apart they are. Conventions that differ only in
rounding (Qwen3's Llama cast vs OLMo2's one rounding) have the same exact maths and are listed once.
"""
from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

from normdiff.harness.data.conventions import CONVENTIONS
from normdiff.harness.data.knobs import ROUNDING_KNOBS
from normdiff.harness.engine import oracle
from normdiff.reports import markup
from normdiff.reports.view import View, csv_file


def _maths(contract):
    """The contract without its rounding knobs: what the float64 oracle evaluates."""
    return contract.replace(**{k: getattr(type(contract)(contract.op), k) for k in ROUNDING_KNOBS})


def divergence(cases) -> pd.DataFrame:
    """One row per op x pair of conventions with different maths x input regime."""
    rows = []
    for op in sorted({c.op for c in cases}):
        families: dict = {}  # exact maths -> the conventions that share it
        for conv in CONVENTIONS.values():
            if op in conv.contracts:
                families.setdefault(_maths(conv.contracts[op]), []).append(conv.name)
        inputs = {}  # one case per input configuration (the id without its op@convention)
        for c in cases:
            if c.op == op:
                inputs.setdefault(c.id.split("/", 1)[1], c)
        distances = _distances(list(families), inputs.values())
        for (ma, mb), per_regime in distances.items():
            rows += _rows(op, ma, families[ma], mb, families[mb], per_regime)
    return pd.DataFrame(rows, columns=["op", "conventions_a", "conventions_b", "knobs", "regime", "cases",
                                       "max_rel_l2", "median_rel_l2"])


def _distances(maths: list, cases) -> dict:
    """(maths a, maths b) -> regime -> the relative L2 distance of the two on each case, for each
    pair of `maths`. Each case's inputs are drawn, and each maths evaluated on them, once for all
    the pairs."""
    pairs = list(itertools.combinations(maths, 2))
    per_pair: dict = {pair: {} for pair in pairs}
    if not pairs:
        return per_pair
    for case in cases:
        arrays = case.inputs().arrays  # a per-head weight is tiled where a contract spans the vector
        with np.errstate(all="ignore"):
            exact = {m: oracle.evaluate(m, arrays, case.num_heads) for m in maths}
        for a, b in pairs:
            per_pair[a, b].setdefault(case.regime, []).append(_distance(exact[a], exact[b]))
    return per_pair


def _distance(a, b) -> float:
    ok = np.isfinite(a) & np.isfinite(b)
    norm = np.sqrt(np.sum(np.where(ok, a, 0.0) ** 2))
    diff = np.sqrt(np.sum(np.where(ok, a - b, 0.0) ** 2))
    return diff / norm if norm else diff


def _rows(op, ma, names_a, mb, names_b, per_regime: dict[str, list[float]]) -> list[dict]:
    knobs = ", ".join(f"{k}: {getattr(ma, k)!r} vs {getattr(mb, k)!r}" for k in ma.knobs() if getattr(ma, k) != getattr(mb, k))
    return [{"op": op, "conventions_a": ", ".join(names_a), "conventions_b": ", ".join(names_b), "knobs": knobs,
             "regime": regime, "cases": len(vals), "max_rel_l2": float(np.max(vals)),
             "median_rel_l2": float(np.median(vals))} for regime, vals in sorted(per_regime.items())]


def summary(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per op x pair: where the two conventions differ (rel_l2 > 1e-3) and where they are
    indistinguishable (< 1e-6)."""
    rows = []
    for (op, a, b, knobs), group in frame.groupby(["op", "conventions_a", "conventions_b", "knobs"], sort=True):
        rows.append({"op": op, "conventions_a": a, "conventions_b": b, "knobs": knobs,
                     "max_rel_l2": group["max_rel_l2"].max(),
                     "differ_in": ", ".join(group[group["max_rel_l2"] > 1e-3]["regime"]),
                     "indistinguishable_in": ", ".join(group[group["max_rel_l2"] < 1e-6]["regime"])})
    return pd.DataFrame(rows)


INTRO = ("The exact contracts of each pair of conventions with different maths, evaluated on the suite's inputs "
         "(relative L2 distance); conventions that differ only in rounding are listed together.")


def _derive(report):
    return divergence(report.cases) if report.cases else None


def _html(report, frame, page) -> str:
    if frame is None or frame.empty:
        return ""
    return ('<h2 id="conventions">How the conventions differ on the same inputs</h2>'
            f"<p>{markup.esc(INTRO)} <b>differ_in</b>: the input regimes where the two are more than 1e-3 apart; "
            "<b>indistinguishable_in</b>: where they are within 1e-6. Every regime is in "
            "<code>conventions.csv</code>.</p>"
            + markup.table(summary(frame), "conventions",
                           classes={"knobs": "wrap", "differ_in": "regimes", "indistinguishable_in": "regimes"}))


# No summary.md section: a CI job summary is read for what failed, and the conventions' maths is the
# same in every run of a suite (report.html and conventions.csv keep it).
CONVENTIONS_VIEW = View("conventions", 100, derive=_derive, files=csv_file("conventions.csv"), html=_html,
                        nav="Conventions",
                        owns=("conventions.csv",),
                       describes=(("conventions.csv", "how the conventions' exact contracts differ on the suite's "
                                                       "inputs, per op, pair and regime"),))
