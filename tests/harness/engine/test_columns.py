"""The results table's columns are defined once (engine/columns.py): the engine builds its rows in
that order, the judge's measurement is that group's fields, and a Row carries one row by name."""
import pandas as pd
import pytest

from normdiff.harness.engine import columns, judge


def test_the_measurement_is_the_measurement_columns_in_order():
    assert columns.measurement_fields(judge.Measurement) == columns.of(columns.MEASUREMENT)


def test_every_column_has_a_type_a_group_and_a_meaning():
    assert len(set(columns.NAMES)) == len(columns.NAMES)
    for c in columns.RESULTS:
        assert c.dtype in ("str", "int", "float", "bool", "category") and c.meaning
        assert c.group in (columns.CASE, columns.IMPLEMENTATION, columns.MEASUREMENT, columns.RUN)
    assert columns.NAMES[:3] == ("case_id", "pass", "output") and columns.NAMES[-1] == "known_finding"


def test_a_run_writes_exactly_these_columns(small_report, tmp_path):
    from normdiff.reports import render

    assert tuple(small_report.results.columns) == columns.NAMES
    out = render.write(small_report, tmp_path / "r")
    assert tuple(pd.read_csv(out / "results.csv", nrows=1).columns) == columns.NAMES


def test_a_row_by_name():
    row = columns.row({"case_id": "c", "pass": "forward", "outcome": "agree", "max_ulp": 0.5})
    assert (row.case_id, row.pass_, row.outcome, row.max_ulp, row.detail) == ("c", "forward", "agree", 0.5, None)


def test_the_column_names_by_attribute():
    """C names every column from the one definition: a misspelt or removed one is an AttributeError."""
    c = columns.C
    assert (c.outcome, c.max_ulp, c.pass_, c.known_finding) == ("outcome", "max_ulp", "pass", "known_finding")
    assert tuple(c) == columns.NAMES and c._fields == columns.Row._fields
    with pytest.raises(AttributeError):
        c.max_ulps  # noqa: B018
    with pytest.raises(AttributeError):
        getattr(c, "pass")
