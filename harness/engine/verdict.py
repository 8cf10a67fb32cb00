"""One verdict: what a row, and an implementation's rows, mean.

Every pass/fail decision normdiff makes is taken here: `normdiff run`'s exit status and summary,
`check`'s verdict, junit.xml's test status, the kill matrix's "caught", the rows `fuzz` searches for.

A row's verdict (`row_verdict`) is one of:

  passes    identical or agree
  not run   unsupported or unavailable: reported, never counted
  excused   outside its budget, and a known finding shows exactly this (its `known_finding`)
  fails     anything else, from an implementation that should agree
  caught    an implementation expected to fail (a mutant) disagrees or returns a NaN mismatch
  missed    an implementation expected to fail agrees, or errors (an error catches nothing)

An implementation's verdict over its rows (`overall`): agrees, disagrees, partial (agrees wherever
it ran, some cases could not run), error (nothing it ran worked), known finding (every failure
excused), unavailable / nothing to run, and for one expected to fail: caught / missed.

Known findings (harness/data/findings.py) match by behaviour, never by name (`annotate`): a row
shows a finding when its case has the finding's columns, its outcome is the finding's, and its
numbers are the finding's: its output is bit-identical to what the library the finding was seen in
gives on the same case where that library shows it (the library's rows: the run's own, or a small
run of it that the engine makes when it was not part of the run: `wanted_exemplars`), or, for a
finding about a failure without an output, its message matches the finding's.

Importing it loads no pandas (a run's workers start first); the functions on tables use the frames
they are given.
"""
from __future__ import annotations

from normdiff.harness.data.findings import KNOWN, Finding
from normdiff.harness.data.outcomes import DISAGREEING, NOT_RUN, PASSING
from normdiff.harness.engine.columns import C
from normdiff.implementations.entry import EXPECTED_TO_FAIL_KINDS

PASSES, NOT_RUN_, EXCUSED, FAILS, CAUGHT, MISSED = "passes", "not run", "excused", "fails", "caught", "missed"
ROW_VERDICTS = (PASSES, NOT_RUN_, EXCUSED, FAILS, CAUGHT, MISSED)
# what `fuzz` searches for: a row that would fail a run, or a mutant caught (the harness can see it)
SEARCHED = (FAILS, CAUGHT)
# check's verdicts from an implementation's (the exit status is check's: harness/commands/check.py)
CHECK = {"agrees": "agrees", "known finding": "agrees", "disagrees": "disagrees", "partial": "partial",
         "error": "error", "unavailable": "error", "nothing to run": "error", "caught": "disagrees",
         "missed": "agrees"}


# ---- rows ----------------------------------------------------------------------------------------


def expects_failure(kind: str) -> bool:
    """Whether an implementation of this kind is expected to fail (a mutant): the results table
    carries the kind, the implementation entry decides which kinds (entry.EXPECTED_TO_FAIL_KINDS)."""
    return kind in EXPECTED_TO_FAIL_KINDS


def is_known(known) -> bool:
    """Whether a known_finding cell holds a finding (a table read from CSV has NaN where none)."""
    return not (known is None or known != known) and str(known) != ""


def row_verdict(outcome: str, expected_to_fail: bool, known="") -> str:
    """The verdict of one row: THE rule (module docstring)."""
    outcome = str(outcome)
    if outcome in NOT_RUN:
        return NOT_RUN_
    if expected_to_fail:
        return CAUGHT if outcome in DISAGREEING else MISSED
    if outcome in PASSING:
        return PASSES
    return EXCUSED if is_known(known) else FAILS


def row_verdicts(rows) -> list[str]:
    """Each row's verdict, for a table's rows (a DataFrame with outcome and kind, known_finding if any)."""
    known = rows[C.known_finding] if C.known_finding in rows else [""] * len(rows)
    return [row_verdict(o, expects_failure(str(k)), f) for o, k, f in zip(rows[C.outcome], rows[C.kind], known)]


def expected(rows):
    """Which rows are an expected-to-fail implementation's (a boolean Series)."""
    return rows[C.kind].astype(str).isin(EXPECTED_TO_FAIL_KINDS)


def explained(rows):
    """Which rows a known finding explains (a boolean Series; False everywhere without the column)."""
    if C.known_finding not in rows:
        return _constant(rows, False)
    return rows[C.known_finding].fillna("").astype(str) != ""


def _constant(rows, value: bool):
    import pandas as pd

    return pd.Series(value, index=rows.index, dtype=bool)


def failing_rows(results):
    """The rows that fail a run: those whose verdict is `fails`."""
    return results[[v == FAILS for v in row_verdicts(results)]]


def failing_implementations(results) -> list[str]:
    return sorted(failing_rows(results)[C.implementation].unique())


# ---- an implementation's rows ----------------------------------------------------------------------


def overall(verdicts, outcomes, outputs=None) -> str:
    """An implementation's verdict from its rows' verdicts, outcomes and whether each returned an
    output (same order; `outputs` None: none did). THE rule for a set of rows (module docstring): a
    failure that returned an output (an error that still has one: a call that wrote into its input)
    ran, and what it did is wrong, so it disagrees as a formula does; one without could not run."""
    outputs = [False] * len(verdicts) if outputs is None else outputs
    rows = [(v, str(o), bool(h)) for v, o, h in zip(verdicts, outcomes, outputs) if v != NOT_RUN_]
    if not rows:
        return "unavailable" if any(str(o) == "unavailable" for o in outcomes) else "nothing to run"
    ran = [v for v, _, _ in rows]
    if all(v in (CAUGHT, MISSED) for v in ran):
        return "caught" if CAUGHT in ran else "missed"
    failing = [(o, h) for v, o, h in rows if v == FAILS]
    if not failing:
        return "known finding" if EXCUSED in ran else "agrees"
    if any(o in DISAGREEING or h for o, h in failing):
        return "disagrees"
    return "error" if len(failing) == len(ran) else "partial"


def has_output(rows) -> list[bool]:
    """Which rows returned an output (their digest is recorded)."""
    if C.output_digest not in rows:
        return [False] * len(rows)
    return [isinstance(d, str) and d != "" for d in rows[C.output_digest]]


def implementation(rows) -> str:
    """One implementation's verdict over its rows (a DataFrame)."""
    return overall(row_verdicts(rows), rows[C.outcome], has_output(rows))


def check(rows) -> str:
    """`normdiff check`'s verdict (agrees, disagrees, partial, error) over the checked rows."""
    return CHECK[implementation(rows)]


# ---- known findings -------------------------------------------------------------------------------


def _allowed(cells, value):
    """findings.allows over a column of text cells (a boolean Series)."""
    if hasattr(value, "pattern"):
        return cells.str.fullmatch(value.pattern).fillna(False).astype(bool)
    return cells.isin(value if isinstance(value, tuple) else (value,))


def _has_columns(finding: Finding, rows):
    """The rows whose case has the finding's columns, whatever their outcome (a boolean Series)."""
    hit = _constant(rows, True)
    for column, value in finding.where:
        hit &= _allowed(rows[column].astype(str), value) if column in rows else False
    return hit


def _where(finding: Finding, rows):
    """The rows with the finding's columns and its outcome (a boolean Series)."""
    return _has_columns(finding, rows) & (rows[C.outcome].astype(str) == finding.outcome)


def _shows(finding: Finding, rows, evidence: dict):
    """Which rows show the finding (a boolean array): its columns and outcome (`_where`), and its
    numbers: the message of a failure without output, else the output's bits against
    `evidence[finding]`. Only the rows with its columns and outcome are looked at one by one."""
    shows = _where(finding, rows).to_numpy(dtype=bool, copy=True)
    at = shows.nonzero()[0]
    if not len(at):
        return shows
    if finding.detail is not None:
        details = rows[C.detail].to_numpy()[at]
        shows[at] = [isinstance(d, str) and finding.detail.search(d) is not None for d in details]
        return shows
    seen = evidence.get(finding, {})
    digests, ids = rows[C.output_digest].to_numpy()[at], rows[C.case_id].to_numpy()[at]
    shows[at] = [isinstance(d, str) and d != "" and seen.get(cid) == d for cid, d in zip(ids, digests)]
    return shows


def _exemplar_digests(finding: Finding, rows) -> dict:
    """case id -> the output digest of the library the finding was seen in, where it shows it."""
    rows = rows[rows[C.implementation] == finding.seen_in]
    rows = rows[_where(finding, rows)]
    return {cid: str(d) for cid, d in zip(rows[C.case_id], rows[C.output_digest].fillna("")) if str(d)}


def annotate(results, known: tuple[Finding, ...] = KNOWN, exemplars=None):
    """The results with the `known_finding` column set where a row shows a finding (where several
    do, the one listed last), and the findings that no longer reproduce: the library they were seen
    in ran cases with their columns and none showed them. `exemplars`: rows of those libraries
    measured outside this table (engine/api.py runs them where they were not part of the run),
    used as evidence only."""
    import pandas as pd

    results = results.assign(**{C.known_finding: ""})
    evidence_rows = results if exemplars is None or not len(exemplars) else pd.concat([results, exemplars])
    evidence = {f: _exemplar_digests(f, evidence_rows) for f in known if f.detail is None}
    stale = []
    for finding in known:
        shows = _shows(finding, results, evidence)
        if shows.any():
            results.loc[shows, C.known_finding] = finding.explanation
        own = results[results[C.implementation] == finding.seen_in]
        if len(own) and _has_columns(finding, own).any() and not _shows(finding, own, evidence).any():
            stale.append(f"{finding.seen_in}: expected {finding.outcome} where {dict(finding.where)}, and it no "
                         f"longer shows: {finding.explanation}")
    return results, stale


def wanted_exemplars(results, frameworks: dict[str, str], known: tuple[Finding, ...] = KNOWN) -> dict[str, set[str]]:
    """The libraries whose outputs are needed as evidence and are not in the table: seen_in name ->
    the case ids where a row that fails (its verdict, with the evidence the table has: `annotate`
    first) has a finding's columns and outcome, and runs in the library's framework (`frameworks`:
    seen_in name -> framework; bits equal to a library's come from running it: a torch function
    wrapping F.layer_norm, not a NumPy port). A mutant's rows never need evidence: its verdict
    ignores findings."""
    failing = results[[v == FAILS for v in row_verdicts(results)]]
    wanted: dict[str, set[str]] = {}
    for finding in known:
        if finding.detail is not None or finding.seen_in not in frameworks:
            continue
        candidates = failing[_where(finding, failing) & (failing[C.implementation] != finding.seen_in)
                             & (failing[C.framework] == frameworks[finding.seen_in])]
        if not len(candidates):
            continue
        have = set(results.loc[results[C.implementation] == finding.seen_in, C.case_id])
        missing = set(candidates[C.case_id]) - have
        if missing:
            wanted.setdefault(finding.seen_in, set()).update(missing)
    return wanted
