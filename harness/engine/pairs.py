"""The pairs table's rows: how far apart two implementations' outputs are on each case both answered.

NumPy only (no pandas), so that the runner can measure a case's pairs as soon as its last output is
judged, while the workers compute the rest (`Pairing`), instead of all of them after the run. The
table itself is engine/tables.pairs_frame.
"""
from __future__ import annotations

import itertools
from collections import Counter, defaultdict

import numpy as np

from normdiff.harness.data.outcomes import NOT_RUN
from normdiff.harness.engine.judge import output_format, ulp_distance

COLUMNS = ["case_id", "dtype", "a", "b", "identical", "identical_elements", "max_ulp", "agree"]


def pairable(o) -> bool:
    """Whether outcome `o` takes part in pairs. Implementations expected to fail (mutants) are left
    out: each is its own group by design, and the kill matrix speaks for them."""
    return o.output is not None and o.measurement.outcome not in NOT_RUN and not o.impl.expected_to_fail


def rows(outcomes) -> list[dict]:
    """The pairs of every case in `outcomes`."""
    by_case = defaultdict(list)
    for o in outcomes:
        by_case[o.case.id].append(o)
    return [row for case_id, outs in by_case.items() for row in case_rows(case_id, outs)]


def case_rows(case_id: str, outs) -> list[dict]:
    """The pairs of one case's outcomes (those not `pairable` are skipped), by implementation name."""
    outs = sorted((o for o in outs if pairable(o)), key=lambda o: o.impl.name)
    if len(outs) < 2:
        return []
    fmt = output_format(outs[0].case)
    keys = [_bits_key(o) for o in outs]
    floats: dict[int, tuple[np.ndarray, bool]] = {}  # each output as float64 once, for all its pairs
    # many implementations return the same bits: each pair of distinct outputs is measured once
    measured: dict[tuple, tuple[dict, bool]] = {}
    found_rows = []
    for (i, a), (j, b) in itertools.combinations(enumerate(outs), 2):
        if keys[i] and keys[i] == keys[j]:  # most pairs in bf16/fp16: no arithmetic needed
            found_rows.append({"case_id": case_id, "dtype": a.case.dtype, "a": a.impl.name, "b": b.impl.name,
                               "identical": True, "identical_elements": 1.0, "max_ulp": 0.0, "agree": True})
            continue
        key = (keys[i], keys[j])
        found = measured.get(key) if all(key) else None
        if found is None:
            found = measured[key] = _distance(_as_float64(floats, i, a), _as_float64(floats, j, b), fmt, a.floor)
        row, same_nonfinite = found
        found_rows.append({"case_id": case_id, "dtype": a.case.dtype, "a": a.impl.name, "b": b.impl.name, **row,
                           "agree": same_nonfinite and row["max_ulp"] <= a.measurement.tolerance_ulp})
    return found_rows


class Pairing:
    """Pairs measured case by case while a run is collected: `add` a judged call's outcomes, and
    the pairs of each case whose `expected` outcomes (case id -> count) have all arrived are
    measured at once; `rows` are those measured so far."""

    def __init__(self, expected: Counter):
        self.expected = expected
        self.pending: dict[str, list] = defaultdict(list)
        self.rows: list[dict] = []

    def add(self, outcomes) -> None:
        for o in outcomes:
            waiting = self.pending[o.case.id]
            waiting.append(o)
            if len(waiting) == self.expected[o.case.id]:
                self.rows += case_rows(o.case.id, self.pending.pop(o.case.id))


def _as_float64(floats: dict, index: int, o) -> tuple[np.ndarray, bool]:
    """Outcome `o`'s output as float64, and whether it holds a NaN (kept in `floats` by `index`)."""
    if index not in floats:
        x = o.output.astype(np.float64)
        floats[index] = x, bool(np.isnan(x).any())
    return floats[index]


def _distance(a: tuple[np.ndarray, bool], b: tuple[np.ndarray, bool], fmt, floor) -> tuple[dict, bool]:
    """A pair's columns, and whether their NaN/Inf patterns are the same. `a` and `b`: the two
    outputs as float64, and whether each holds a NaN."""
    (x, x_nan), (y, y_nan) = a, b
    dist, same_nonfinite = ulp_distance(x, y, fmt, floor)  # (first: it refuses outputs of two shapes)
    equal = x == y
    if x_nan and y_nan:  # a NaN where both have one counts as equal (np.array_equal's equal_nan)
        equal |= np.isnan(x) & np.isnan(y)
    return {"identical": bool(equal.all()), "identical_elements": float(np.mean(equal)), "max_ulp": dist}, \
        same_nonfinite


def _bits_key(o) -> tuple:
    """What makes two outputs of one case the same bits ("" digest: unknown, never shared)."""
    return (o.measurement.output_digest, o.output.dtype.str, o.output.shape) if o.measurement.output_digest else ()
