"""The agreement matrix and the groups, on a hand-made pairs table."""
import pandas as pd

from normdiff.reports.views.agreement import agreement_matrix, groups


def test_agreement_matrix_and_groups():
    pairs = pd.DataFrame([
        ("c1", "bfloat16", "a", "b", True, 1.0, 0.0, True), ("c2", "float32", "a", "b", False, 0.999, 1.0, True),
        ("c1", "bfloat16", "a", "m", False, 0.1, 50.0, False), ("c2", "float32", "a", "m", False, 0.7, 0.5, True),
        ("c1", "bfloat16", "b", "m", False, 0.1, 50.0, False),
    ], columns=["case_id", "dtype", "a", "b", "identical", "identical_elements", "max_ulp", "agree"])
    m = agreement_matrix(pairs)
    assert m.loc["a", "b"] == m.loc["b", "a"] == 1.0 and m.loc["a", "m"] == 0.5 and m.loc["m", "m"] == 1.0
    assert agreement_matrix(pairs, "identical").loc["a", "b"] == 0.5
    assert groups(pairs, ["a", "b", "m"]) == [["a", "b"], ["m"]]
    assert groups(pairs, ["a", "b", "m"], "identical") == [["a"], ["b"], ["m"]]
    bf16 = pairs[pairs["dtype"] == "bfloat16"]
    assert groups(bf16, ["a", "b", "m"], "identical") == [["a", "b"], ["m"]]
    assert groups(pairs, ["a", "b", "m"], "identical", share=0.5) == [["a", "b"], ["m"]]
    assert groups(pairs, ["a", "b", "m"], "identical_elements", share=0.99) == [["a", "b"], ["m"]]
