"""Worst cases, the replay command and the side-by-side of actual values."""
import numpy as np
import pandas as pd

from normdiff.cases.model import Case
from normdiff.harness import reference
from normdiff.reports import worst


def test_repro_command_quotes_only_what_the_shell_needs():
    assert (worst.repro_command("rms_norm@qwen3/bf16/8x1024/tiny_rms:1e-3/w=trained", "hf-qwen3.5")
            == "normdiff repro rms_norm@qwen3/bf16/8x1024/tiny_rms:1e-3/w=trained --implementation hf-qwen3.5")
    assert worst.repro_command("c#1 x", "my impl") == "normdiff repro 'c#1 x' --implementation 'my impl'"


def test_ranked_puts_unexplained_failures_first():
    rows = pd.DataFrame({
        "case_id": ["a", "b", "c", "d", "e"], "implementation": ["x"] * 5, "kind": ["own"] * 5,
        "outcome": ["agree", "disagree", "error", "nan_mismatch", "unsupported"],
        "max_ulp": [9.0, 3.0, np.nan, 50.0, np.nan], "known_finding": ["", "", "", "explained", ""]})
    assert worst.ranked(rows)["case_id"].tolist() == ["b", "c", "d", "a"]
    assert worst.worst_rows(rows, 2)["case_id"].tolist() == ["b", "c"]


def test_worst_keys_and_keep_outputs(small_report):
    keys = worst.worst_keys(small_report.results)
    by_impl = dict((i, c) for c, i in keys)
    assert by_impl["fx-eps_outside"] == "rms_norm@qwen3/bf16/4x128/tiny_rms:1e-3/w=trained"
    assert "fx-raises" not in by_impl  # no output to show
    assert not any(i.startswith("mut-") for i in by_impl)

    class Outcome:
        def __init__(self, case_id, name, output):
            self.case = type("C", (), {"id": case_id})()
            self.impl = type("I", (), {"name": name})()
            self.output = output

    outcomes = [Outcome(c, i, np.zeros(1)) for c, i in small_report.outputs]
    assert worst.keep_outputs(outcomes, small_report.results, False) == {}
    assert set(worst.keep_outputs(outcomes, small_report.results, True)) == set(small_report.outputs)
    assert set(worst.keep_outputs(outcomes, small_report.results, "worst")) == keys


def test_side_by_side_finds_the_worst_element_as_the_judge_counts_it():
    case = Case("rms_norm", "qwen3", "float32", 4, 64, weights="trained")
    inputs = case.inputs()
    out = reference.evaluate(case.contract, inputs.arrays, inputs.num_heads).astype(np.float32)
    out[2, 40] *= 1.001  # ~ 8000 ulp at row 2, column 40
    frame = worst.side_by_side({(case.id, "mine"): out}, case.id, "mine")
    assert frame.attrs["row"] == 2 and frame.attrs["column"] == 40
    assert list(frame.columns) == ["[0]", "[1]", "[2]", "[3]", "[4]", "[5]", "[40] worst"]
    assert list(frame.index) == ["x (input)", "exact (float64)", "reference (float32)", "mine", "ulps from exact"]
    assert frame.loc["ulps from exact", "[40] worst"] > 1000
    assert (frame.loc["ulps from exact"].iloc[:6] <= 0.5).all()  # the rest is correctly rounded
    assert frame.loc["x (input)", "[0]"] == float(inputs.arrays["x"][2, 0])


def test_side_by_side_of_a_nan_and_of_what_was_not_kept():
    case = Case("l2_norm", "qwen3.5", "float16", 4, 64)
    inputs = case.inputs()
    out = reference.evaluate(case.contract, inputs.arrays, inputs.num_heads).astype(np.float16)
    out[1, 3] = np.nan
    frame = worst.side_by_side({(case.id, "m"): out}, case.id, "m")
    assert frame.attrs["row"] == 1 and np.isinf(frame.loc["ulps from exact", "[3] worst"])
    assert worst.side_by_side({}, case.id, "m") is None
    assert worst.side_by_side({("not a case id", "m"): out}, "not a case id", "m") is None
