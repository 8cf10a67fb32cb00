"""One builder for every failure message: check, repro, junit.xml, report.html and summary.md say
the same facts in the same words wherever a failing row is shown.

Modelled on torch.testing's `_make_mismatch_msg` (torch/testing/_comparison.py): what was compared,
how it came out, the greatest error against what is allowed, then what it says about itself and
how to replay it. A row is a results.csv row (a dict or a pandas row). The error against its
budget is said by normdiff/wording.py, as everywhere else.
"""
from __future__ import annotations

from normdiff.harness.engine.tables import repro_command
from normdiff import wording
from normdiff.text import number, ulps


# the columns of a row that figures, headline, detail and message read
COLUMNS = ("case_id", "implementation", "outcome", "max_ulp", "tolerance_ulp", "rel_l2", "nan_count", "inf_count",
           "detail", "repro")


def records(rows, extra: tuple[str, ...] = ()) -> list[dict]:
    """The rows of a results table as dicts of COLUMNS (and `extra`) that it has: what this module
    reads, got far more cheaply than by DataFrame.iterrows (a Series per row of every column)."""
    columns = [c for c in COLUMNS + tuple(extra) if c in rows]
    return [dict(zip(columns, values)) for values in zip(*(rows[c].tolist() for c in columns))]


def _get(row, key, default=None):
    try:
        value = row.get(key, default)
    except AttributeError:
        value = getattr(row, key, default)
    return default if value is None else value


def figures(row) -> str:
    """'max 121 ulp (budget 2), rel_l2 0.41' for a row that returned an output; for a NaN/Inf
    mismatch what is non-finite first; '' for a row without an output."""
    ulp = _get(row, "max_ulp")
    if str(_get(row, "outcome", "")) == "nan_mismatch":
        nan, inf = int(_get(row, "nan_count", 0) or 0), int(_get(row, "inf_count", 0) or 0)
        said = f"{nan} NaN and {inf} Inf in the output"
        return said + (f"; its finite elements within {ulps(ulp)}" if ulp is not None and ulp == ulp else "")
    if ulp is None or ulp != ulp:
        return ""
    text = f"max {wording.with_budget(ulp, _get(row, 'tolerance_ulp'))}"
    rel = _get(row, "rel_l2")
    return text + (f", rel_l2 {number(rel)}" if rel is not None and rel == rel else "")


def headline(row) -> str:
    """'CASE_ID: disagree, max 121 ulp (budget 2), rel_l2 0.41'."""
    said = figures(row)
    return f"{_get(row, 'case_id', '?')}: {_get(row, 'outcome', '?')}" + (f", {said}" if said else "")


def detail(row) -> str:
    text = _get(row, "detail", "")
    return "" if text != text else str(text)  # NaN read back from CSV: no detail


def message(row, replay: bool = True, limit: int | None = None) -> str:
    """The headline, then the row's detail (cut to `limit` characters when given) and the command
    that replays it, one per indented line."""
    lines = [headline(row)]
    said = detail(row)
    if said:
        if limit is not None and len(said) > limit:
            said = said[:limit - 3] + "..."
        lines.append(f"  detail: {said}")
    if replay:
        given = _get(row, "repro", "")
        replay = given if isinstance(given, str) and given else repro_command(_get(row, 'case_id', ''),
                                                                              _get(row, 'implementation', ''))
        lines.append(f"  replay: {replay}")
    return "\n".join(lines)
