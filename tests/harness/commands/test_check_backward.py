"""`normdiff check --pass backward`: an explicit NumPy backward (first parameter dy) and a torch
forward whose autograd.Function has a hand-written backward, judged against the exact VJP and
diagnosed by the catalogued backward bug's name."""
import subprocess
import sys

import pytest

NUMPY, TORCH = "tests/fixtures/backward_numpy.py", "tests/fixtures/backward_torch.py"



def test_a_correct_explicit_numpy_backward_agrees(check_json):
    code, result = check_json(f"{NUMPY}:rms_norm_backward", "--op", "rms_norm", "--convention", "qwen3", "--pass", "backward")
    assert code == 0 and result["verdict"] == "agrees", result
    # each row says its pass and output beside its id (dx and dw, the gradients)
    assert {(row["pass"], row["output"]) for row in result["rows"]} == {("backward", "dx"), ("backward", "dw")}
    assert all(row["case_id"].endswith(f"out={row['output']}") for row in result["rows"])
    assert result["cases"]["total"] >= 20


def test_an_explicit_backward_runs_the_backward_pass_only_by_default(check_json):
    code, result = check_json(f"{NUMPY}:rms_norm_backward", "--op", "rms_norm", "--convention", "qwen3", "--dtype", "bf16")
    assert code == 0 and all("/dy=" in row["case_id"] for row in result["rows"]), result


def test_an_explicit_backward_asked_for_the_forward_is_a_usage_error():
    proc = subprocess.run([sys.executable, "-m", "normdiff.harness.commands.cli", "check", f"{NUMPY}:rms_norm_backward",
                           "--op", "rms_norm", "--convention", "qwen3", "--pass", "forward"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "has no forward pass" in proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr


def test_the_weight_missing_in_dx_is_diagnosed_by_name(check_json):
    code, result = check_json(f"{NUMPY}:rms_norm_backward_no_weight", "--op", "rms_norm", "--convention", "qwen3",
                         "--pass", "backward")
    assert code == 1 and result["verdict"] == "disagrees"
    best = result["diagnosis"][0]
    assert best["bug"] == "bwd-weight-missing", result["diagnosis"]
    assert best["matched"] == best["of"] > 0 and "dx matches that on" in best["symptom"]
    # dw is right: only dx rows disagree
    bad = [row for row in result["rows"] if row["outcome"] not in ("identical", "agree")]
    assert bad and all(row["case_id"].endswith("out=dx") for row in bad)


def test_a_torch_autograd_function_with_the_weight_twice_is_diagnosed(check_json):
    pytest.importorskip("torch")
    code, result = check_json(f"{TORCH}:rms_norm_weight_twice", "--op", "rms_norm", "--convention", "qwen3",
                         "--pass", "backward")
    assert code == 1 and result["framework"] == "torch"
    assert result["diagnosis"][0]["bug"] == "bwd-weight-twice", result["diagnosis"]


def test_a_backward_that_returns_no_weight_gradient_is_named_so(check_json):
    pytest.importorskip("torch")
    code, result = check_json(f"{TORCH}:rms_norm_no_weight_gradient", "--op", "rms_norm", "--convention", "qwen3",
                              "--pass", "backward", "--dtype", "float32")
    best = result["diagnosis"][0]
    assert code == 1 and best["bug"] == "gradient-missing" and best["changes"] == {"gradients": ["weight"]}
    bad = [row for row in result["rows"] if row["outcome"] not in ("identical", "agree")]
    assert bad and all(row["case_id"].endswith("out=dw") for row in bad)  # dx is right


def test_a_torch_forward_is_checked_in_both_passes(check_json):
    pytest.importorskip("torch")
    code, result = check_json(f"{TORCH}:rms_norm_torch", "--op", "rms_norm", "--convention", "qwen3", "--dtype", "bf16")
    assert code == 0, result
    passes = {"backward" if "/dy=" in row["case_id"] else "forward" for row in result["rows"]}
    assert passes == {"forward", "backward"}


COMMAND = f"{sys.executable} tests/fixtures/command_program.py"


def test_a_command_backward_with_the_weight_missing_is_diagnosed_by_name(check_json):
    code, result = check_json("--command", f"{COMMAND} bwd-weight-missing", "--op", "rms_norm", "--convention", "qwen3",
                         "--pass", "backward", "--dtype", "bf16")
    assert code == 1 and result["framework"] == "command"
    assert result["diagnosis"][0]["bug"] == "bwd-weight-missing", result["diagnosis"]
    assert all("/dy=" in row["case_id"] for row in result["rows"])
    # every row replays: the command line and the backward case id
    assert all("--command" in row["repro"] and "/out=" in row["repro"] for row in result["rows"])


def test_a_command_is_checked_on_the_forward_unless_pass_is_given(check_json, tmp_path):
    # a small suite: every call starts the program afresh
    suite = tmp_path / "small.toml"
    suite.write_text('[[group]]\nops = ["rms_norm"]\nconventions = ["qwen3"]\ndtypes = ["bfloat16"]\n'
                     'shapes = ["8x128"]\nregimes = ["normal", "tiny_rms:1e-3"]\nweights = ["trained"]\n'
                     'dy = ["aligned"]\n')
    narrow = ("--op", "rms_norm", "--convention", "qwen3", "--suite", str(suite))
    code, result = check_json("--command", f"{COMMAND} correct", *narrow)
    assert code == 0 and result["rows"] and not any("/dy=" in row["case_id"] for row in result["rows"])
    code, result = check_json("--command", f"{COMMAND} correct", *narrow, "--pass", "both")
    passes = {"/dy=" in row["case_id"] for row in result["rows"]}
    assert code == 0 and passes == {True, False}, result["verdict"]


def test_a_norm_missing_one_plus_in_both_passes_is_named_gamma_missing_one_first(check_json):
    # issue 31: the forward's mistake explains its own gradients, so the forward's bug is named,
    # not a backward-only one
    pytest.importorskip("torch")
    code, result = check_json("tests/fixtures/user/torch_module.py:ZeroCentredMissingOne", "--op", "rms_norm",
                              "--convention", "qwen3.5", "--dtype", "bf16")
    assert code == 1 and result["verdict"] == "disagrees"
    passes = {"backward" if "/dy=" in row["case_id"] else "forward" for row in result["rows"]
              if row["outcome"] not in ("identical", "agree")}
    assert passes == {"forward", "backward"}, passes
    best = result["diagnosis"][0]
    assert best["bug"] == "gamma-missing-one" and best["convincing"], result["diagnosis"]
