"""The long results table, the pairs table, and the few operations on them the engine itself needs.

`results` has one row per case x implementation: the case's description (its pass, forward or
backward, and the output it judges, y or a gradient; its operands' regimes in the columns the op
records name; a backward case's upstream-gradient regime `dy`), the implementation's, the judge's measurement, the time it took
and the command that replays a row that did not pass. `pairs` has one row per case x pair of
implementations that both produced an output: whether the two are bit-identical and how far apart
they are in ULPs. Every report view (reports/views/) is a pandas computation on these two tables.

Also here, because a run needs it before any report exists: the ranking of each implementation's
rows worst first (`ranked`), which decides which outputs a run keeps for its side-by-sides. Which
rows fail, are excused by a known finding or are expected to fail is engine/verdict.py's.
Imports pandas: the engine's api imports this module only once the workers are computing.
"""
from __future__ import annotations

import shlex

import numpy as np
import pandas as pd

from normdiff.harness.data.outcomes import NOT_RUN, OUTCOMES, PASSING
from normdiff.harness.engine import pairs, verdict
from normdiff.harness.engine.columns import NAMES, C, case_columns
from normdiff.implementations.entry import USER_KIND


def repro_command(case_id: str, implementation, replays: dict | None = None) -> str:
    """The command that replays one row of the results table. `implementation` is an
    Implementation (its `replay` arguments) or a name, looked up in `replays` (a run's
    meta["replay"]: the user and command implementations' arguments) or else a registered one's."""
    replay = getattr(implementation, "replay", None) or (replays or {}).get(str(implementation)) \
        or ("--implementation", str(implementation))
    return f"normdiff repro {shlex.quote(str(case_id))} {shlex.join(replay)}"


def replays(implementations) -> dict:
    """name -> repro arguments, for the implementations `normdiff repro` cannot find by name."""
    return {i.name: list(i.replay) for i in implementations if tuple(i.replay) != ("--implementation", i.name)}


def results_frame(outcomes) -> pd.DataFrame:
    rows, per_case = [], {}
    for o in outcomes:
        c = o.case
        if c.id not in per_case:  # each case has a row per implementation: describe it once
            per_case[c.id] = case_columns(c)
        row = {**per_case[c.id], C.implementation: o.impl.name, C.kind: o.impl.kind, C.framework: o.impl.framework}
        row.update(o.measurement.as_row())
        row[C.seconds] = o.seconds
        outcome = o.measurement.outcome
        row[C.repro] = "" if outcome in PASSING or outcome in NOT_RUN else repro_command(c.id, o.impl)
        row[C.diagnosis] = ""  # a user implementation's disagreeing rows get theirs once the run is over
        rows.append(row)
    # the columns in their one definition's order (engine/columns.py); known_finding comes with the verdict
    frame = pd.DataFrame(rows, columns=[n for n in NAMES if n != C.known_finding] if rows else None)
    if not frame.empty:
        frame[C.outcome] = pd.Categorical(frame[C.outcome], categories=OUTCOMES, ordered=True)
        frame = frame.sort_values([C.case_id, C.implementation], kind="stable").reset_index(drop=True)
    return frame


def pairs_frame(outcomes=None, rows: list[dict] | None = None) -> pd.DataFrame:
    """Pairwise distances between implementations' outputs on each case they both answered
    (engine/pairs.py), from the outcomes or from pair rows measured already (a run's RunData.pairs),
    in the order of case, then the two implementations' names."""
    table = pd.DataFrame(pairs.rows(outcomes) if rows is None else rows, columns=pairs.COLUMNS)
    return table.sort_values(["case_id", "a", "b"], kind="stable").reset_index(drop=True)


# ---- what fails a run (engine/verdict.py decides), and each implementation's worst rows ----------


def ranked(results: pd.DataFrame) -> pd.DataFrame:
    """Rows that ran, worst first within each implementation: unexplained failures (outside
    identical/agree, no known finding), then known findings, then the rest; within each, the
    largest max_ulp first (rows without one, e.g. errors, after those with one)."""
    ran = results[~results[C.outcome].isin(NOT_RUN)]
    failing = ~ran[C.outcome].isin(PASSING)
    known = verdict.explained(ran)
    rank = np.where(failing & ~known, 0, np.where(failing, 1, 2))
    return (ran.assign(_rank=rank, _ulp=ran[C.max_ulp].fillna(-np.inf))
            .sort_values([C.implementation, "_rank", "_ulp", C.case_id], ascending=[True, True, False, True],
                         kind="stable")
            .drop(columns=["_rank", "_ulp"]))


def has_output(rows: pd.DataFrame) -> pd.Series:
    if C.output_digest in rows:
        return rows[C.output_digest].fillna("").astype(str) != ""
    return rows[C.max_ulp].notna()


def worst_keys(results: pd.DataFrame) -> set[tuple[str, str]]:
    """(case_id, implementation) of each non-mutant implementation's worst row that returned an
    output: the outputs a report needs for its side-by-sides."""
    rows = ranked(results[~verdict.expected(results)])
    rows = rows[has_output(rows)].groupby(C.implementation).head(1)
    return set(zip(rows[C.case_id], rows[C.implementation]))


def diagnosed_keys(results: pd.DataFrame) -> set[tuple[str, str]]:
    """(case_id, implementation) of each failing row of a user's implementation that returned an
    output: what its diagnosis reads (harness/analysis/answer.py)."""
    rows = results[(results[C.kind] == USER_KIND) & np.array(verdict.has_output(results), dtype=bool)]
    fails = [v == verdict.FAILS for v in verdict.row_verdicts(rows)]
    rows = rows[np.array(fails, dtype=bool)]
    return set(zip(rows[C.case_id], rows[C.implementation]))


def keep_outputs(outcomes, results: pd.DataFrame, mode) -> dict:
    """The outputs a run keeps: every output (mode True), only the worst cases' and a user
    implementation's failing ones ("worst", what a report's side-by-sides and that implementation's
    diagnosis need), or none (False / None)."""
    if not mode:
        return {}
    every = {(o.case.id, o.impl.name): o.output for o in outcomes if o.output is not None}
    if mode == "worst":
        wanted = worst_keys(results) | diagnosed_keys(results)
        return {k: v for k, v in every.items() if k in wanted}
    return every
