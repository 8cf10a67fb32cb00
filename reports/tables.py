"""The long results table and the views derived from it.

`results` has one row per case x implementation. `pairs` has one row per case x pair of
implementations that both produced an output: whether the two are bit-identical and how far apart
they are in ULPs. Every other view (summary, agreement matrix, groups) is a pandas computation on
these two tables.
"""
from __future__ import annotations

import itertools
from collections import defaultdict

import numpy as np
import pandas as pd

from normdiff.harness.compare import NOT_RUN, OUTCOMES, PASSING, ulp_distance
from normdiff.harness.dtypes import get_format
from normdiff.harness.findings import explained
from normdiff.reports import worst

CASE_COLUMNS = ["case_id", "op", "convention", "dtype", "shape", "regime", "weights", "gate", "seed"]
IMPL_COLUMNS = ["implementation", "kind", "framework"]


def results_frame(outcomes) -> pd.DataFrame:
    rows = []
    for o in outcomes:
        c = o.case
        row = {"case_id": c.id, "op": c.op, "convention": c.convention, "dtype": c.dtype,
               "shape": c.shape_text, "regime": c.regime, "weights": c.weights if c.contract.spec.has_weight else "",
               "gate": c.gate, "seed": c.seed, "implementation": o.impl.name, "kind": o.impl.kind,
               "framework": o.impl.framework}
        row.update(o.measurement.as_row())
        row["seconds"] = o.seconds
        row["repro"] = repro_command(c.id, o.impl.name, o.measurement.outcome)
        rows.append(row)
    frame = pd.DataFrame(rows)
    if not frame.empty:
        frame["outcome"] = pd.Categorical(frame["outcome"], categories=OUTCOMES, ordered=True)
        frame = frame.sort_values(["case_id", "implementation"], kind="stable").reset_index(drop=True)
    return frame


def repro_command(case_id: str, implementation: str, outcome: str) -> str:
    """The shell command that replays a case that did not pass (`normdiff repro`); "" for the
    others."""
    return "" if outcome in PASSING or outcome in NOT_RUN else worst.repro_command(case_id, implementation)


def pairs_frame(outcomes) -> pd.DataFrame:
    """Pairwise distances between implementations' outputs on each case they both answered.
    Mutants are left out: each is its own group by design, and the kill matrix speaks for them."""
    by_case = defaultdict(list)
    for o in outcomes:
        if o.output is not None and o.measurement.outcome not in NOT_RUN and o.impl.kind != "mutant":
            by_case[o.case.id].append(o)
    rows = []
    for case_id, outs in by_case.items():
        fmt = get_format(outs[0].case.dtype)
        for a, b in itertools.combinations(sorted(outs, key=lambda o: o.impl.name), 2):
            if _same_bits(a, b):  # most pairs in bf16/fp16: no arithmetic needed
                rows.append({"case_id": case_id, "dtype": a.case.dtype, "a": a.impl.name, "b": b.impl.name,
                             "identical": True, "identical_elements": 1.0, "max_ulp": 0.0, "agree": True})
                continue
            x, y = a.output.astype(np.float64), b.output.astype(np.float64)
            dist, same_nonfinite = ulp_distance(x, y, fmt)
            rows.append({"case_id": case_id, "dtype": a.case.dtype, "a": a.impl.name, "b": b.impl.name,
                         "identical": bool(np.array_equal(x, y, equal_nan=True)),
                         "identical_elements": float(np.mean((x == y) | (np.isnan(x) & np.isnan(y)))),
                         "max_ulp": dist, "agree": same_nonfinite and dist <= a.measurement.tolerance_ulp})
    return pd.DataFrame(rows, columns=["case_id", "dtype", "a", "b", "identical", "identical_elements",
                                       "max_ulp", "agree"])


def _same_bits(a, b) -> bool:
    return (a.output.dtype == b.output.dtype and a.output.shape == b.output.shape
            and a.measurement.output_digest == b.measurement.output_digest != "")


def summary(results: pd.DataFrame) -> pd.DataFrame:
    """One row per implementation: outcome counts and the worst case it produced."""
    counts = pd.crosstab(results["implementation"], results["outcome"]).reindex(columns=list(OUTCOMES), fill_value=0)
    meta = results.groupby("implementation")[["kind", "framework"]].first()
    worst = (results.dropna(subset=["max_ulp"]).sort_values("max_ulp", ascending=False)
             .groupby("implementation").head(1).set_index("implementation"))
    table = meta.join(counts)
    table["worst_max_ulp"] = worst["max_ulp"]
    table["worst_case"] = worst["case_id"]
    table["verdict"] = [verdict(results[results["implementation"] == name]) for name in table.index]
    return table.reset_index()


def verdict(rows: pd.DataFrame) -> str:
    """'agrees', 'disagrees', 'unavailable' (nothing ran) or, for mutants, 'caught' / 'missed'."""
    ran = rows[~rows["outcome"].isin(NOT_RUN)]
    if ran.empty:
        return "unavailable" if (rows["outcome"] == "unavailable").any() else "nothing to run"
    failing = ~ran["outcome"].isin(PASSING)
    if (rows["kind"] == "mutant").all():
        return "caught" if failing.any() else "missed"
    if failing.any() and explained(ran)[failing].all():
        return "known finding"
    return "disagrees" if failing.any() else "agrees"


def failing_rows(results: pd.DataFrame) -> pd.DataFrame:
    """Non-mutant rows outside identical/agree, not explained by a known finding."""
    return results[(results["kind"] != "mutant") & ~results["outcome"].isin(PASSING + NOT_RUN) & ~explained(results)]


def failing_implementations(results: pd.DataFrame) -> list[str]:
    """Non-mutant implementations with an unexplained case outside identical/agree."""
    rows = failing_rows(results)
    return sorted(rows["implementation"].unique())


def agreement_matrix(pairs: pd.DataFrame, value: str = "agree") -> pd.DataFrame:
    """Fraction of shared cases on which two implementations agree (or are `identical`)."""
    if pairs.empty:
        return pd.DataFrame()
    both = pd.concat([pairs, pairs.rename(columns={"a": "b", "b": "a"})])
    matrix = both.pivot_table(index="a", columns="b", values=value, aggfunc="mean")
    names = sorted(set(matrix.index) | set(matrix.columns))
    matrix = matrix.reindex(index=names, columns=names)
    for name in names:
        matrix.loc[name, name] = 1.0
    matrix.index.name, matrix.columns.name = None, None
    return matrix


def groups(pairs: pd.DataFrame, names: list[str], value: str = "agree", share: float = 1.0) -> list[list[str]]:
    """Implementations linked by `value` on at least `share` of the cases they share (connected
    components; share=1.0: on every case)."""
    parent = {n: n for n in names}

    def root(n):
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    if not pairs.empty:
        linked = pairs.groupby(["a", "b"])[value].mean()
        for (a, b), fraction in linked.items():
            if fraction >= share and a in parent and b in parent:
                parent[root(a)] = root(b)
    members = defaultdict(list)
    for n in names:
        members[root(n)].append(n)
    return sorted((sorted(g) for g in members.values()), key=lambda g: (-len(g), g))
