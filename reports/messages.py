"""One builder for every failure message: check, repro, junit.xml, report.html and summary.md say
the same facts in the same words wherever a failing row is shown.

Modelled on torch.testing's `_make_mismatch_msg` (torch/testing/_comparison.py): what was compared,
how it came out, the greatest error against what is allowed, then what it says about itself and
how to replay it. A row is a results.csv row: a Row (engine/columns.py), or a dict or a pandas row
taken as one. The error against its budget is said by normdiff/wording.py, as everywhere else.
"""
from __future__ import annotations

from normdiff import wording
from normdiff.harness.engine import columns
from normdiff.harness.engine.columns import C, Row
from normdiff.harness.engine.tables import repro_command
from normdiff.text import clipped, number, ulps


# the columns of a row that figures, headline, detail and message read
COLUMNS = (C.case_id, C.implementation, C.outcome, C.max_ulp, C.tolerance_ulp, C.rel_l2, C.nan_count, C.inf_count,
           C.detail, C.repro, C.diagnosis)


def records(table, extra: tuple[str, ...] = ()) -> list[Row]:
    """The rows of a results table as Rows holding COLUMNS (and `extra`), the columns this module
    reads (engine/columns.py `rows`)."""
    return columns.rows(table, COLUMNS + tuple(extra))


def _or(value, default):
    return default if value is None else value


def figures(row) -> str:
    """'max 121 ulp (budget 2), rel_l2 0.41' for a row that returned an output; for a NaN/Inf
    mismatch what is non-finite first; '' for a row without an output."""
    row = columns.row(row)
    ulp = row.max_ulp
    if str(_or(row.outcome, "")) == "nan_mismatch":
        nan, inf = int(row.nan_count or 0), int(row.inf_count or 0)
        said = f"{nan} NaN and {inf} Inf in the output"
        return said + (f"; its finite elements within {ulps(ulp)}" if ulp is not None and ulp == ulp else "")
    if ulp is None or ulp != ulp:
        return ""
    text = f"max {wording.with_budget(ulp, row.tolerance_ulp)}"
    rel = row.rel_l2
    return text + (f", rel_l2 {number(rel)}" if rel is not None and rel == rel else "")


def headline(row) -> str:
    """'CASE_ID: disagree, max 121 ulp (budget 2), rel_l2 0.41'."""
    row = columns.row(row)
    said = figures(row)
    return f"{_or(row.case_id, '?')}: {_or(row.outcome, '?')}" + (f", {said}" if said else "")


def detail(row) -> str:
    """The row's detail as a report shows it: at most normdiff.text.SHOWN characters (results.csv
    holds what the worker sent back)."""
    text = _or(columns.row(row).detail, "")
    return "" if text != text else clipped(text)  # NaN read back from CSV: no detail


def diagnosis(row) -> str:
    """Which bug a user implementation's disagreeing row looks like, as check says it ('' for none)."""
    text = _or(columns.row(row).diagnosis, "")
    return "" if text != text else str(text)  # NaN read back from CSV: none


def message(row, replay: bool = True, limit: int | None = None) -> str:
    """The headline, then the row's detail (cut to `limit` characters when given), its diagnosis
    and the command that replays it, one per indented line."""
    row = columns.row(row)
    lines = [headline(row)]
    said = detail(row)
    if said:
        if limit is not None and len(said) > limit:
            said = said[:limit - 3] + "..."
        lines.append(f"  detail: {said}")
    if diagnosis(row):
        lines.append(f"  diagnosis: {diagnosis(row)}")
    if replay:
        given = row.repro
        replay = given if isinstance(given, str) and given else repro_command(_or(row.case_id, ""),
                                                                              _or(row.implementation, ""))
        lines.append(f"  replay: {replay}")
    return "\n".join(lines)
