"""`normdiff repro`: replay one case against one implementation, and the standalone script it
writes, which must run without normdiff and print the max ULP the run measured."""
import re
import shlex
import subprocess
import sys

import pytest

from normdiff.cases.model import Case
from normdiff.cases.suites import Suite
from normdiff.harness import api
from normdiff.harness.commands import cli
from normdiff.harness.data.conventions import op_conventions
from normdiff.implementations.entry import Implementation

NUMPY_CASE = "rms_norm@qwen3/bf16/4x128/tiny_rms:1e-3/w=trained"
ROPE_CASE = "qk_norm_rope@qwen3/bf16/4x4x32/head_scales:lognormal/w=trained"
# runs the script with every normdiff import failing: it must need only numpy, ml_dtypes, torch
NO_NORMDIFF = ("import runpy, sys; sys.modules['normdiff'] = None; "
               "runpy.run_path(sys.argv[1], run_name='__main__')")


def max_ulp(text: str) -> str:
    found = re.findall(r"^max_ulp (\S+)$", text, re.M)
    assert len(found) == 1, text
    return found[0]


def run_repro(capsys, *args):
    code = cli.main(["repro", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_repro_prints_outcome_errors_detectors_and_the_worst_row(capsys):
    code, out, _ = run_repro(capsys, NUMPY_CASE, "--implementation", "numpy")
    assert code == 0
    assert f"case            {NUMPY_CASE}" in out and "outcome         agree" in out
    for word in ("max_ulp", "p99_ulp", "rel_l2", "scale_ratio", "span_rms_err", "channel_bias_ulp", "cosine"):
        assert word in out
    assert "worst element: row" in out and "\n  reference" in out and "\n  numpy" in out and "\n  x " in out
    report = api.run_suite(Suite("one", "", (Case.from_id(NUMPY_CASE),)), api.select(["numpy"]))
    assert max_ulp(out) == f"{report.results['max_ulp'].iloc[0]:.6g}"


@pytest.mark.parametrize("case_id, name, inline", [
    (NUMPY_CASE, "numpy", True),  # the own NumPy code inlined
    (NUMPY_CASE, "eps-outside-sqrt", True),  # a torch mutant: torch_own inlined, its knob spelled out
    (ROPE_CASE, "qk-norm-after-rope", True),  # ULPs at the rotation pair's magnitude
])
def test_script_runs_without_normdiff_and_prints_the_same_max_ulp(tmp_path, capsys, case_id, name, inline):
    script = tmp_path / "repro_script.py"
    code, out, _ = run_repro(capsys, case_id, "--implementation", name, "--script", str(script))
    assert code == (0 if name == "numpy" else 1)  # a mutant disagrees: the repro exits 1
    text = script.read_text()
    assert ("from normdiff" in text) != inline
    proc = subprocess.run([sys.executable, "-c", NO_NORMDIFF, str(script)], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert max_ulp(proc.stdout) == max_ulp(out)
    assert "worst element" in proc.stdout and "reference" in proc.stdout


@pytest.mark.parametrize("case_id, name, agrees", [
    ("rms_norm_quant@mxfp8/bf16/4x128/normal/w=trained", "numpy", True),
    ("rms_norm_quant@mxfp8/bf16/4x128/normal/w=trained", "quant-e8m0-nearest", False),  # its scales
    ("rms_norm_quant@sglang-fp8/bf16/4x128/zero_rows/w=trained", "quant-zero-row-nan", False),  # its q
    ("add_rms_norm_quant@vllm-int8/fp16/4x128/normal/w=trained/r=large", "numpy", True),
    ("rms_norm_quant_static@nvfp4/bf16/8x1024/outliers/w=trained/s=nvfp4-amax4", "quant-nvfp4-scale-unclamped", False),
    ("rms_norm_quant_static@nvfp4/bf16/8x1024/outliers/w=trained/s=nvfp4-amax4", "torch", True),
])
def test_a_quantizing_cases_script_judges_the_call_in_the_formats_units_without_normdiff(tmp_path, capsys, case_id,
                                                                                          name, agrees):
    """The script's own rounding to the format and its brackets give normdiff's verdict on the
    whole call (q and scale): a correct implementation agrees, each mutant is caught where the run
    catches it."""
    script = tmp_path / "repro_script.py"
    run_repro(capsys, case_id, "--implementation", name, "--script", str(script))
    proc = subprocess.run([sys.executable, "-c", NO_NORMDIFF, str(script)], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert proc.returncode == (0 if agrees else 1), proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith("agrees" if agrees else "disagrees")
    calls = Case.from_id(case_id).outputs()
    rows = api.run_suite(Suite("one", "", tuple(calls)), api.select([name])).results
    assert rows["outcome"].isin(["identical", "agree"]).all() == agrees


def test_script_through_an_adapter(tmp_path, capsys):
    pytest.importorskip("jax")
    script = tmp_path / "jax_repro.py"
    case_id = "rms_norm@qwen3.5/fp32/4x128/normal/w=trained"
    code, out, _ = run_repro(capsys, case_id, "-i", "jax", "--script", str(script))
    assert code == 0 and "from normdiff.implementations.loading import load_entry" in script.read_text()
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert max_ulp(proc.stdout) == max_ulp(out)


@pytest.mark.parametrize("args, message", [
    (["bogus-id", "-i", "numpy"], "malformed case id 'bogus-id'"),
    (["rms_norm@qwen9/bf16/4x128/normal/w=trained", "-i", "numpy"], "unknown convention 'qwen9'"),
    ([NUMPY_CASE, "-i", "no-such-impl"], "unknown implementation 'no-such-impl'"),
    ([NUMPY_CASE, "-i", "hf-olmo2"], "'hf-olmo2' does not implement rms_norm@qwen3"),
])
def test_unknown_case_or_implementation_exits_2(capsys, args, message):
    code, _, err = run_repro(capsys, *args)
    assert code == 2 and message in err


def test_failing_rows_carry_the_repro_command(fixtures_dir):
    bad = Implementation("fx-eps", "user", "numpy", f"{fixtures_dir / 'misbehaving.py'}:eps_outside",
                         frozenset(op_conventions()))
    cases = (Case.from_id(NUMPY_CASE), Case.from_id("rms_norm@qwen3/bf16/4x128/normal/w=trained"),
             Case.from_id("gated_rms_norm@qwen3.5/bf16/4x128/normal/w=ones/z=closed#1"))
    results = api.run_suite(Suite("t", "", cases), [bad]).results.set_index("case_id")
    command = results.loc[NUMPY_CASE, "repro"]
    assert command == f"normdiff repro {NUMPY_CASE} --implementation fx-eps"
    assert shlex.split(command) == ["normdiff", "repro", NUMPY_CASE, "--implementation", "fx-eps"]
    passing = results[results["outcome"].isin(["identical", "agree"])]
    assert len(passing) and (passing["repro"] == "").all()
    # '#' starts a shell comment: such ids are quoted
    from normdiff.harness.engine.tables import repro_command

    quoted = repro_command(cases[2].id, "fx-eps")
    assert quoted.startswith("normdiff repro '") and shlex.split(quoted)[2] == cases[2].id


USER = "tests/fixtures/user/numpy_norms.py"


def test_a_user_row_replays_from_its_target_and_writes_a_script(tmp_path, capsys):
    code, out, _ = run_repro(capsys, NUMPY_CASE, "--target", f"{USER}:rms_norm_eps_outside", "--script",
                             str(tmp_path / "user_repro.py"))
    assert code == 1 and "outcome         disagree" in out and "(user, numpy)" in out
    proc = subprocess.run([sys.executable, str(tmp_path / "user_repro.py")], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert max_ulp(proc.stdout) == max_ulp(out) and "beyond budget" in proc.stdout
    code, out, _ = run_repro(capsys, NUMPY_CASE, "--target", f"{USER}:rms_norm", "--call", "f(x, weight, eps=eps)")
    assert code == 0 and ("outcome         agree" in out or "outcome         identical" in out)


def test_a_command_row_replays_from_its_command(capsys, fixtures_dir):
    program = f"{sys.executable} {fixtures_dir / 'command_program.py'} correct"
    code, out, _ = run_repro(capsys, NUMPY_CASE, "--command", program)
    assert code == 0 and "(user, command)" in out
    code, _, err = run_repro(capsys, NUMPY_CASE, "--command", program, "--call", "f(x)")
    assert code == 2 and "--call applies to a Python target" in err


def test_repro_needs_exactly_one_implementation(capsys):
    assert cli.main(["repro", NUMPY_CASE]) == 2  # argparse's refusals are usage errors (exit 2, no SystemExit)
    assert cli.main(["repro", NUMPY_CASE, "-i", "numpy", "--target", f"{USER}:rms_norm"]) == 2
    code, _, err = run_repro(capsys, NUMPY_CASE, "--target", f"{USER}:rms_norm", "--convention", "olmo2")
    assert code == 2 and "--convention olmo2 is not the convention of case" in err


@pytest.mark.parametrize("given, differs", [
    # cut after the regime: from_id would fill in w=ones and replay another case than the trained one
    ("rms_norm@qwen3/bf16/4x128/tiny_rms:1e-3", "adds w=ones"),
    # the convention's own eps, which a full id leaves out
    ("rms_norm@qwen3/bf16/4x128/tiny_rms:1e-3/w=trained/eps=1e-6", "has no eps=1e-6"),
    # another eps written as typed, not as the id spells it
    ("rms_norm@qwen3/bf16/4x128/tiny_rms:1e-3/w=trained/eps=1e-5", "adds eps=1e-05 and has no eps=1e-5"),
])
def test_an_id_that_is_not_its_cases_full_id_is_refused_with_the_full_one(capsys, given, differs):
    canonical = Case.from_id(given).id
    for args in (["-i", "numpy"], ["--target", f"{USER}:rms_norm"]):
        code, out, err = run_repro(capsys, given, *args)
        assert code == 2 and out == "", out
        assert f"{given!r} is not a full case id: it reads as {canonical!r}, which {differs};" in err, err
