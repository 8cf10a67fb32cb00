"""Each implementation's worst rows and the side-by-side of actual values."""
import numpy as np
import pandas as pd

from normdiff.cases.model import Case
from normdiff.harness.engine import oracle, runner
from normdiff.reports import worst


def test_worst_rows_take_the_ranking_per_implementation():
    rows = pd.DataFrame({
        "case_id": ["a", "b", "c", "d", "e"], "implementation": ["x"] * 5, "kind": ["own"] * 5,
        "outcome": ["agree", "disagree", "error", "nan_mismatch", "unsupported"],
        "max_ulp": [9.0, 3.0, np.nan, 50.0, np.nan], "known_finding": ["", "", "", "explained", ""]})
    assert worst.worst_rows(rows, 2)["case_id"].tolist() == ["b", "c"]


def test_side_by_side_finds_the_worst_element_as_the_judge_counts_it():
    case = Case.of("rms_norm", "qwen3", "float32", "4x64", weight="trained")
    inputs = case.inputs()
    out = oracle.evaluate(case.contract, inputs.arrays, inputs.num_heads).astype(np.float32)
    out[2, 40] *= 1.001  # ~ 8000 ulp at row 2, column 40
    frame = worst.side_by_side({(case.id, "mine"): out}, case.id, "mine")
    assert frame.attrs["row"] == 2 and frame.attrs["column"] == 40
    assert list(frame.columns) == ["[0]", "[1]", "[2]", "[3]", "[4]", "[5]", "[40] worst"]
    assert list(frame.index) == ["x (input)", "exact (float64)", "reference (float32)", "mine", "ulps from exact"]
    assert frame.loc["ulps from exact", "[40] worst"] > 1000
    assert (frame.loc["ulps from exact"].iloc[:6] <= 0.5).all()  # the rest is correctly rounded
    assert frame.loc["x (input)", "[0]"] == float(inputs.arrays["x"][2, 0])


def test_side_by_side_of_a_nan_and_of_what_was_not_kept():
    case = Case.of("l2_norm", "qwen3.5", "float16", "4x64")
    inputs = case.inputs()
    out = oracle.evaluate(case.contract, inputs.arrays, inputs.num_heads).astype(np.float16)
    out[1, 3] = np.nan
    frame = worst.side_by_side({(case.id, "m"): out}, case.id, "m")
    assert frame.attrs["row"] == 1 and np.isinf(frame.loc["ulps from exact", "[3] worst"])
    assert worst.side_by_side({}, case.id, "m") is None
    assert worst.side_by_side({("not a case id", "m"): out}, "not a case id", "m") is None


def test_side_by_side_of_a_weight_gradient_shows_the_weight_it_is_the_gradient_of():
    # dw has the weight's shape, not x's: the row beside it is the weight's, never a row of NaN
    case = Case.of("rms_norm", "qwen3", "float32", "8x64", weight="trained", dy="normal", output="dw")
    prepared = runner.prepare(case, [case])
    out = prepared.ref.exact.astype(np.float32)
    out[5] *= 1.001
    frame = worst.side_by_side({(case.id, "mine"): out}, case.id, "mine")
    assert frame.attrs["row"] == 0 and frame.attrs["column"] == 5 and frame.attrs["input"] == "weight"
    assert list(frame.index) == ["weight (input)", "exact (float64)", "reference (float32)", "mine", "ulps from exact"]
    weight = case.inputs().arrays["weight"]
    assert np.isfinite(frame.loc["weight (input)"]).all()
    assert frame.loc["weight (input)", "[5] worst"] == float(weight[5])
    text = worst.as_text(frame)
    assert "nan" not in text and text.splitlines()[1].split()[0] == "weight"
    values = worst.as_values(frame)
    assert values["input"] == "weight" and values["weight"][0] == float(weight[0]) and "x" not in values
    assert values["ulp_error"][-1] > 1000 and values["yours"][-1] == float(out[5])
