"""The engine's table operations: replay commands, the ranking and the outputs a run keeps (known
findings and failing rows: test_verdict.py)."""
import numpy as np
import pandas as pd

from normdiff.harness.engine.tables import diagnosed_keys, keep_outputs, ranked, repro_command, worst_keys


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
    # and a user implementation's failing rows, which its diagnosis reads (the fixtures are all user code)
    failing = small_report.results[(small_report.results["kind"] == "user")
                                   & ~small_report.results["outcome"].isin(["identical", "agree", "unsupported",
                                                                            "unavailable"])
                                   & (small_report.results["output_digest"].fillna("") != "")]
    diagnosed = set(zip(failing["case_id"], failing["implementation"]))
    assert diagnosed and diagnosed == diagnosed_keys(small_report.results)
    assert set(keep_outputs(outcomes, small_report.results, "worst")) == keys | diagnosed
