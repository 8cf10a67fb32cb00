"""Verdicts and the per-implementation summary, on a hand-made results table."""
import pandas as pd

from normdiff.harness.engine.verdict import failing_implementations
from normdiff.reports.views.summary import summary


def results(rows):
    return pd.DataFrame(rows, columns=["case_id", "implementation", "kind", "framework", "outcome", "max_ulp"])


def test_verdicts_and_failing_implementations():
    r = results([
        ("c1", "good", "own", "numpy", "identical", 0.4), ("c2", "good", "own", "numpy", "agree", 1.2),
        ("c1", "bad", "own", "torch", "agree", 1.0), ("c2", "bad", "own", "torch", "disagree", 40.0),
        ("c1", "mut", "mutant", "torch", "disagree", 900.0), ("c2", "mut", "mutant", "torch", "agree", 1.0),
        ("c1", "gone", "framework", "jax", "unavailable", None), ("c2", "odd", "own", "jax", "unsupported", None),
    ])
    assert failing_implementations(r) == ["bad"]  # mutants and unavailable do not fail a run
    table = summary(r).set_index("implementation")
    assert table.loc["good", "verdict"] == "agrees" and table.loc["bad", "verdict"] == "disagrees"
    assert table.loc["mut", "verdict"] == "caught" and table.loc["gone", "verdict"] == "unavailable"
    assert table.loc["bad", "worst_case"] == "c2" and table.loc["bad", "disagree"] == 1


def test_partial_and_error_say_what_happened():
    r = results([
        ("c1", "half", "own", "numpy", "agree", 1.0), ("c2", "half", "own", "numpy", "error", None),
        ("c1", "none", "own", "numpy", "crashed", None), ("c2", "none", "own", "numpy", "error", None),
        ("c1", "both", "own", "numpy", "error", None), ("c2", "both", "own", "numpy", "disagree", 9.0),
    ])
    table = summary(r).set_index("implementation")
    assert table.loc["half", "verdict"] == "partial" and table.loc["none", "verdict"] == "error"
    assert table.loc["both", "verdict"] == "disagrees"
    assert failing_implementations(r) == ["both", "half", "none"]  # a run still fails on any of them
