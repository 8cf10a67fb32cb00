"""Diagnosis of the backward pass: which catalogued backward bug do a user's gradients compute?

Each backward bug of the op (harness/data/backward_bugs.py) is computed on every examined case
(at most MAX_CASES of the disagreeing backward cases, spread over dtypes, regimes and outputs) by
the own NumPy backward with that bug's one deviation (implementations/numpy_backward.py), exactly
(float64, unrounded) for a bug of formula and in its own float32 and dtype roundings for a bug of
rounding (dw summed in the input dtype: its exact output is the correct one). A case is explained
when the user's gradient lands within the case's budget (plus the 1 ULP two rounded outputs may be
apart), counted at the same scale the judge uses (the magnitude of the gradient's terms), of the
bug's, and closer to it than to the correct gradient. A bug corrupts only some outputs (dx, dw,
dgate): a disagreeing output it leaves alone counts against it. The most cases explained wins;
"looks like" needs half of them (diagnosis.COVERAGE).
"""
from __future__ import annotations

import numpy as np

from normdiff.cases.model import Case
from normdiff.harness.analysis.diagnosis import MAX_CASES, Match, _spread
from normdiff.harness.data.backward_bugs import BACKWARD_BUGS
from normdiff.harness.data.dtypes import get_format
from normdiff.harness.engine.runner import prepare
from normdiff.implementations import numpy_backward


def _distance(out: np.ndarray, expected: np.ndarray, scale: np.ndarray, fmt) -> float:
    """Max |out - expected| in ULPs of the dtype at the larger of the terms' scale and |expected|
    (inf where their NaN / Inf patterns differ)."""
    o, e = np.asarray(out, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    if o.shape != e.shape:
        return float("inf")
    fo, fe = np.isfinite(o), np.isfinite(e)
    if not np.array_equal(fo, fe):
        return float("inf")
    if not fo.any():
        return 0.0
    ulp = fmt.ulp(np.maximum(scale, np.abs(e)))
    return float((np.abs(o - e) / ulp)[fo].max())


def diagnose(outputs: dict[str, np.ndarray], op: str, convention: str, top: int = 5) -> list[Match]:
    """`outputs`: backward case id -> the implementation's gradient, where it disagrees."""
    cases = [Case.from_id(cid) for cid in _spread(sorted(outputs))][:MAX_CASES]
    examined = []
    for c in cases:
        p = prepare(c, [c])
        e = p.expected[c.operand]
        examined.append((c, p, e, outputs[c.id]))
    matches = []
    for bug in BACKWARD_BUGS.values():
        if bug.op != op:
            continue
        matched, dists = 0, []
        for c, p, e, out in examined:
            if c.output not in bug.outputs or c.dtype not in bug.dtypes:
                continue
            with np.errstate(all="ignore"):
                grads = numpy_backward.backward(op, c.contract, p.inputs, p.dy, bug=bug.id, exact=not bug.rounding)
            fmt = get_format(c.dtype)
            d = _distance(out, grads[c.operand], e.ref.floor, fmt)
            if d <= e.budget + 1.0 and d < _distance(out, e.ref.exact, e.ref.floor, fmt):
                matched += 1
                dists.append(d)
        if matched:
            outs = "/".join(bug.outputs)
            matches.append(Match(bug.id, {}, matched, len(examined), float(np.mean(dists)),
                                 f"see normdiff explain {bug.id}",
                                 f"{bug.symptom}: {outs} matches that on {matched}/{len(examined)} cases"))
    return sorted(matches, key=lambda m: (-m.matched, m.distance))[:top]
