"""`check` and `run --with` find code that reads memory as if contiguous, through the layout axis."""
import subprocess
import sys
from pathlib import Path

FIX = Path(__file__).resolve().parents[2] / "fixtures"
RAW = f"{FIX}/user_raw_pointer.py"
NARROW = ("--op", "rms_norm", "--convention", "qwen3", "--dtype", "bf16", "--regime", "normal")


def test_check_names_a_layout_dependent_implementation(check_json):
    code, result = check_json(f"{RAW}:rms_norm_torch", *NARROW, "--pass", "forward")
    assert code == 1 and result["verdict"] == "disagrees"
    best = result["diagnosis"][0]
    assert best["bug"] == "layout-dependent" and best["convincing"], result["diagnosis"]
    assert set(best["changes"]["layout"]) == {"transposed", "padded", "strided"}
    wrong = {row["case_id"] for row in result["rows"] if row["outcome"] not in ("agree", "identical")}
    assert wrong and all("/layout=" in cid for cid in wrong)


def test_check_of_correct_numpy_code_agrees_in_every_layout(check_json):
    code, result = check_json(f"{FIX}/user/numpy_norms.py:rms_norm", *NARROW, "--pass", "forward")
    assert code == 0, result
    laid = {row["case_id"].split("/layout=")[1] for row in result["rows"] if "/layout=" in row["case_id"]}
    assert laid == {"transposed", "padded", "strided", "offset", "broadcast"}


def test_code_that_takes_the_first_dimension_for_the_rows_is_wrong_on_a_batch_of_sequences_alone(check_json):
    code, result = check_json(f"{FIX}/user/numpy_norms.py:rms_norm_rows_from_first_dim", "--op", "rms_norm",
                              "--convention", "qwen3", "--suite", "kernel", "--dtype", "float32", "--regime", "normal")
    best = result["diagnosis"][0]
    assert code == 1 and best["bug"] == "layout-dependent" and best["changes"] == {"layout": ["batched"]}
    assert "x.shape[0]" in best["fix"] and best["convincing"]
    wrong = {row["case_id"] for row in result["rows"] if row["outcome"] not in ("agree", "identical")}
    assert wrong and all(cid.endswith("/layout=batched") for cid in wrong)


def test_a_registered_implementation_is_checked_on_rows_and_user_code_on_a_batch_too():
    from normdiff.harness.commands.usercode import user_implementation
    from normdiff.implementations import registry
    assert "checked on rows" in registry.get("numpy").layout_problem("batched")
    impl = user_implementation(f"{FIX}/user/jax_norms.py:rms_norm", "rms_norm", "qwen3", None)
    assert impl.layout_problem("batched") is None and impl.layout_problem("padded") is not None  # JAX: no strides


def test_run_with_finds_it_in_the_default_suite(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "normdiff.harness.commands.cli", "run", "-i", "numpy",
                           "--with", f"{RAW}:rms_norm_numpy", "--framework", "numpy", "--op", "rms_norm",
                           "--convention", "qwen3", "--pass", "forward", "--out", str(tmp_path / "r"), "-q"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    import pandas as pd

    rows = pd.read_csv(tmp_path / "r" / "results.csv", keep_default_na=False)
    mine = rows[(rows["kind"] == "user") & (rows["outcome"] != "unsupported")]
    failing = mine[~mine["outcome"].isin(["agree", "identical"])]
    assert len(failing) and set(failing["layout"]) <= {"transposed", "padded", "strided"}
    assert set(mine.loc[mine["layout"] == "contiguous", "outcome"]) <= {"agree", "identical"}
    assert "rms_norm_numpy" in (tmp_path / "r" / "invariance.csv").read_text()


def test_repro_and_its_script_lay_the_inputs_out_as_the_run_did(tmp_path):
    case_id = "rms_norm@qwen3/bf16/8x1024/normal/w=trained/layout=strided"
    target = ["--target", f"{RAW}:rms_norm_numpy", "--framework", "numpy", "--op", "rms_norm", "--convention", "qwen3"]
    cli = [sys.executable, "-m", "normdiff.harness.commands.cli", "repro", case_id, *target]
    shown = subprocess.run(cli, capture_output=True, text=True, timeout=120)
    assert "nan_mismatch" in shown.stdout or "disagree" in shown.stdout, shown.stdout + shown.stderr
    script = tmp_path / "repro.py"
    subprocess.run([*cli, "--script", str(script)], capture_output=True, timeout=120)  # exits 1: it fails
    ran = subprocess.run([sys.executable, "-I", str(script)], capture_output=True, text=True, timeout=120)
    assert "LAYOUT, PER_CASE = 'strided'" in script.read_text()
    assert "nan_mismatch" in ran.stdout or "beyond budget" in ran.stdout, ran.stdout + ran.stderr
