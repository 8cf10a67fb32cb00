"""The engine's table operations: replay commands, known findings, failing rows, the ranking and
the outputs a run keeps."""
import numpy as np
import pandas as pd

from normdiff.harness.data.findings import Finding
from normdiff.harness.engine.tables import (annotate, failing_implementations, failing_rows, keep_outputs, ranked,
                                            repro_command, worst_keys)


def results(rows):
    return pd.DataFrame(rows, columns=["case_id", "implementation", "kind", "framework", "outcome", "max_ulp"])


def test_repro_command_quotes_only_what_the_shell_needs():
    assert (repro_command("rms_norm@qwen3/bf16/8x1024/tiny_rms:1e-3/w=trained", "hf-qwen3.5")
            == "normdiff repro rms_norm@qwen3/bf16/8x1024/tiny_rms:1e-3/w=trained --implementation hf-qwen3.5")
    assert repro_command("c#1 x", "my impl") == "normdiff repro 'c#1 x' --implementation 'my impl'"


def test_ranked_puts_unexplained_failures_first():
    rows = pd.DataFrame({
        "case_id": ["a", "b", "c", "d", "e"], "implementation": ["x"] * 5, "kind": ["own"] * 5,
        "outcome": ["agree", "disagree", "error", "nan_mismatch", "unsupported"],
        "max_ulp": [9.0, 3.0, np.nan, 50.0, np.nan], "known_finding": ["", "", "", "explained", ""]})
    assert ranked(rows)["case_id"].tolist() == ["b", "c", "d", "a"]


def test_worst_keys_and_keep_outputs(small_report):
    keys = worst_keys(small_report.results)
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
    assert keep_outputs(outcomes, small_report.results, False) == {}
    assert set(keep_outputs(outcomes, small_report.results, True)) == set(small_report.outputs)
    assert set(keep_outputs(outcomes, small_report.results, "worst")) == keys


def test_known_findings_stay_in_the_table_but_do_not_fail_the_run():
    r = results([("c1", "lib", "framework", "numpy", "nan_mismatch", None),
                 ("c2", "lib", "framework", "numpy", "disagree", 9.0)])
    r["regime"] = ["zero_rows", "normal"]
    finding = Finding("lib", "nan_mismatch", (("regime", "zero_rows"),), "0/0 in fp16")
    annotated, stale = annotate(r, (finding,))
    assert annotated["known_finding"].tolist() == ["0/0 in fp16", ""]
    assert failing_rows(annotated)["case_id"].tolist() == ["c2"]  # the unexplained one still fails
    fixed = r.assign(outcome=["agree", "agree"])
    assert annotate(fixed, (finding,))[1] and not failing_implementations(annotate(fixed, (finding,))[0])


def test_a_user_check_of_the_same_library_function_carries_the_finding():
    r = results([("c1", "normalize", "user", "torch", "nan_mismatch", None)])
    r["regime"] = ["zero_rows"]
    finding = Finding("lib-normalize", "nan_mismatch", (("regime", "zero_rows"),), "0/0 in fp16",
                      targets=("torch.nn.functional:normalize",))
    annotated, _ = annotate(r, (finding,), targets={"normalize": "torch.nn.functional:normalize"})
    assert annotated["known_finding"].tolist() == ["0/0 in fp16"] and failing_rows(annotated).empty
    elsewhere, _ = annotate(r, (finding,), targets={"normalize": "my_norms.py:normalize"})
    assert elsewhere["known_finding"].tolist() == [""]
