"""Summary, verdicts, agreement matrix and groups, on hand-made tables."""
import pandas as pd

from normdiff.reports import tables


def results(rows):
    return pd.DataFrame(rows, columns=["case_id", "implementation", "kind", "framework", "outcome", "max_ulp"])


def test_verdicts_and_failing_implementations():
    r = results([
        ("c1", "good", "own", "numpy", "identical", 0.4), ("c2", "good", "own", "numpy", "agree", 1.2),
        ("c1", "bad", "own", "torch", "agree", 1.0), ("c2", "bad", "own", "torch", "disagree", 40.0),
        ("c1", "mut", "mutant", "torch", "disagree", 900.0), ("c2", "mut", "mutant", "torch", "agree", 1.0),
        ("c1", "gone", "framework", "jax", "unavailable", None), ("c2", "odd", "own", "jax", "unsupported", None),
    ])
    assert tables.failing_implementations(r) == ["bad"]  # mutants and unavailable do not fail a run
    summary = tables.summary(r).set_index("implementation")
    assert summary.loc["good", "verdict"] == "agrees" and summary.loc["bad", "verdict"] == "disagrees"
    assert summary.loc["mut", "verdict"] == "caught" and summary.loc["gone", "verdict"] == "unavailable"
    assert summary.loc["bad", "worst_case"] == "c2" and summary.loc["bad", "disagree"] == 1


def test_agreement_matrix_and_groups():
    pairs = pd.DataFrame([
        ("c1", "bfloat16", "a", "b", True, 1.0, 0.0, True), ("c2", "float32", "a", "b", False, 0.999, 1.0, True),
        ("c1", "bfloat16", "a", "m", False, 0.1, 50.0, False), ("c2", "float32", "a", "m", False, 0.7, 0.5, True),
        ("c1", "bfloat16", "b", "m", False, 0.1, 50.0, False),
    ], columns=["case_id", "dtype", "a", "b", "identical", "identical_elements", "max_ulp", "agree"])
    m = tables.agreement_matrix(pairs)
    assert m.loc["a", "b"] == m.loc["b", "a"] == 1.0 and m.loc["a", "m"] == 0.5 and m.loc["m", "m"] == 1.0
    assert tables.agreement_matrix(pairs, "identical").loc["a", "b"] == 0.5
    assert tables.groups(pairs, ["a", "b", "m"]) == [["a", "b"], ["m"]]
    assert tables.groups(pairs, ["a", "b", "m"], "identical") == [["a"], ["b"], ["m"]]
    bf16 = pairs[pairs["dtype"] == "bfloat16"]
    assert tables.groups(bf16, ["a", "b", "m"], "identical") == [["a", "b"], ["m"]]
    assert tables.groups(pairs, ["a", "b", "m"], "identical", share=0.5) == [["a", "b"], ["m"]]
    assert tables.groups(pairs, ["a", "b", "m"], "identical_elements", share=0.99) == [["a", "b"], ["m"]]


def test_known_findings_stay_in_the_table_but_do_not_fail_the_run():
    from normdiff.harness.findings import Finding, annotate

    r = results([("c1", "lib", "framework", "numpy", "nan_mismatch", None),
                 ("c2", "lib", "framework", "numpy", "disagree", 9.0)])
    r["regime"] = ["zero_rows", "normal"]
    finding = Finding("lib", "nan_mismatch", (("regime", "zero_rows"),), "0/0 in fp16")
    annotated, stale = annotate(r, (finding,))
    assert annotated["known_finding"].tolist() == ["0/0 in fp16", ""]
    assert tables.failing_rows(annotated)["case_id"].tolist() == ["c2"]  # the unexplained one still fails
    fixed = r.assign(outcome=["agree", "agree"])
    assert annotate(fixed, (finding,))[1] and not tables.failing_implementations(annotate(fixed, (finding,))[0])
