"""CONTRIBUTING.md stays true: a new op is its record (plus its maths in the oracle and the own
implementations, when the knobs cannot already say it), and a new view is one file.

The throwaway op here is a weightless RMS norm (Llama 4's QK norm has this shape): the knobs express
it, so adding it touches only the op record and a convention that defines it, and runs through the
case model, the oracle, the runner, the own NumPy implementation and every report file unchanged.
"""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pandas as pd
import pytest

from normdiff.cases import suites
from normdiff.cases.model import Case
from normdiff.cases.suites import Suite
from normdiff.harness import api
from normdiff.harness.data import knobs, ops
from normdiff.harness.data.ops import norm, record
from normdiff.harness.data.contracts import Contract
from normdiff.harness.data.conventions import CONVENTIONS, define
from normdiff.implementations import registry
from normdiff.reports import render
from normdiff.reports.view import View, csv_file
from normdiff.reports.views import VIEWS

THROWAWAY = record.Op("plain_rms_norm", "y = x * rsqrt(mean(x^2) + eps), no weight (a test's throwaway op)",
                      (record.X,), ("x", "eps"), (knobs.STATISTIC,), exact=norm.evaluate, vjp=norm.vjp)


@pytest.fixture
def throwaway_op(monkeypatch):
    """The op record and one convention that defines it: all an op the knobs express needs."""
    monkeypatch.setitem(ops.OPS, THROWAWAY.name, THROWAWAY)
    monkeypatch.setitem(CONVENTIONS, "throwaway", define("throwaway", "a test's convention",
                                                         Contract(THROWAWAY.name, eps=1e-5)))
    return dataclasses.replace(registry.get("numpy"), op_conventions={(THROWAWAY.name, "throwaway")})


def test_a_new_op_runs_through_cases_oracle_runner_and_report(throwaway_op, tmp_path):
    cases = suites.expand(dict(ops=[THROWAWAY.name], conventions=["throwaway"], dtypes=["float32", "bfloat16"],
                               shapes=["4x128"], regimes=["normal", "tiny_rms:1e-3", "zero_rows"]))
    assert [c.id for c in cases][:2] == ["plain_rms_norm@throwaway/fp32/4x128/normal",
                                         "plain_rms_norm@throwaway/fp32/4x128/tiny_rms:1e-3"]
    assert all(Case.from_id(c.id) == c for c in cases)
    assert list(cases[0].inputs().arrays) == ["x"]
    report = api.run_suite(Suite("throwaway", "", tuple(cases)), [throwaway_op])
    rows = report.results
    assert len(rows) == 6 and set(rows["outcome"].astype(str)) <= {"identical", "agree"}, rows[["case_id", "outcome"]]
    assert (rows["weights"] == "").all() and report.meta["exit_code"] == 0
    out = render.write(report, tmp_path / "r")
    assert len(pd.read_csv(out / "results.csv")) == 6
    summary = pd.read_csv(out / "summary.csv").set_index("implementation")
    assert summary.loc["numpy", "identical"] + summary.loc["numpy", "agree"] == 6
    assert json.loads((out / "meta.json").read_text())["cases"] == 6


def test_a_new_view_is_one_file(small_report, monkeypatch, tmp_path):
    """A view needs no change anywhere else: the folder, summary.md and report.html pick it up."""
    def derive(report):
        return report.results.groupby("implementation")["max_ulp"].max().reset_index()

    view = View("max_by_impl", 35, derive=derive, files=csv_file("max_by_impl.csv"),
                markdown=lambda report, frame: "## Max ULP by implementation\n\n" + frame.to_string(),
                html=lambda report, frame, page: '<h2 id="max_by_impl">Max ULP by implementation</h2>',
                nav="Max ULP", owns=("max_by_impl.csv",), describes=(("max_by_impl.csv", "a test's view"),))
    monkeypatch.setitem(VIEWS, view.name, view)
    report = dataclasses.replace(small_report)  # a fresh report: the session's has derived its views
    out = render.write(report, tmp_path / "r")
    assert set(pd.read_csv(out / "max_by_impl.csv")["implementation"]) == set(small_report.results["implementation"])
    assert "## Max ULP by implementation" in (out / "summary.md").read_text()
    page = (out / "report.html").read_text()
    assert 'id="max_by_impl"' in page and 'href="#max_by_impl"' in page and "max_by_impl.csv" in page


def test_every_file_contributing_names_exists():
    root = Path(__file__).resolve().parents[1]
    text = (root / "CONTRIBUTING.md").read_text()
    named = set(re.findall(r"`((?:harness|cases|implementations|reports|normdiff|tests)/[\w/.]+\.(?:py|toml))`", text))
    named |= {f"implementations/{n}" for n in re.findall(r"`(\w+_own\.py)`", text)}
    named = {p for p in named if "NAME" not in p}  # the placeholders of "add a framework / view"
    assert len(named) >= 20 and not [p for p in sorted(named) if not (root / p).is_file()]
