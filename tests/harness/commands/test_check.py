"""`normdiff check` as a new user runs it: right code agrees, each classic bug is diagnosed first,
broken targets exit 2 with a message that says why."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from normdiff.harness.commands import cli

FIX = "tests/fixtures/user"


def check(*args):
    proc = subprocess.run([sys.executable, "-m", "normdiff.harness.commands.cli", "check", *args, "--json"],
                          capture_output=True, text=True, timeout=300)
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, proc.stdout + proc.stderr  # exactly one JSON object
    return proc.returncode, json.loads(lines[0])


def test_correct_numpy_function_agrees():
    code, result = check(f"{FIX}/numpy_norms.py:rms_norm", "--op", "rms_norm", "--convention", "qwen3")
    assert code == 0 and result["verdict"] == "agrees" and result["diagnosis"] == []
    assert result["cases"]["total"] >= 60 and result["cases"]["agree"] == result["cases"]["total"]
    assert result["framework"] == "numpy"
    # an agreeing check says by how much: its worst case against that case's budget
    margin = result["margin"]
    assert 0 < margin["worst_ulp"] <= margin["budget_ulp"] and margin["of"] == result["cases"]["total"]
    assert margin["share_of_budget"] == pytest.approx(margin["worst_ulp"] / margin["budget_ulp"])


@pytest.mark.parametrize("name, op, convention, bug", [
    ("rms_norm_eps_outside", "rms_norm", "qwen3", "eps-outside-sqrt"),
    ("rms_norm_gamma_plus_one", "rms_norm", "qwen3", "gamma-plus-one"),
    ("zero_centred_missing_one", "rms_norm", "qwen3.5", "gamma-missing-one"),
    ("qk_norm_full_vector", "qk_norm", "qwen3", "qk-norm-full-vector"),
])
def test_each_classic_bug_is_diagnosed_first(name, op, convention, bug):
    code, result = check(f"{FIX}/numpy_norms.py:{name}", "--op", op, "--convention", convention)
    assert code == 1 and result["verdict"] == "disagrees"
    best = result["diagnosis"][0]
    assert best["bug"] == bug, result["diagnosis"]
    assert best["matched"] == best["of"] > 0
    assert result["worst_case"]["case_id"] and result["worst_case"]["max_ulp"] > 2


def test_l2_norm_function_with_a_default_eps():
    code, result = check(f"{FIX}/numpy_norms.py:l2_norm", "--op", "l2_norm", "--convention", "qwen3.5")
    assert code == 0, result


def test_torch_module_class_agrees():
    pytest.importorskip("torch")
    code, result = check(f"{FIX}/torch_module.py:MyRMSNorm", "--op", "rms_norm", "--convention", "qwen3")
    assert code == 0 and result["framework"] == "torch", result
    # applied per head, as Qwen3Attention applies q_norm
    code, result = check(f"{FIX}/torch_module.py:MyRMSNorm", "--op", "qk_norm", "--convention", "qwen3")
    assert code == 0, result


def test_jax_function_agrees():
    pytest.importorskip("jax")
    code, result = check(f"{FIX}/jax_norms.py:rms_norm", "--op", "rms_norm", "--convention", "qwen3.5")
    assert code == 0 and result["framework"] == "jax", result


@pytest.mark.parametrize("target, message", [
    (f"{FIX}/nope.py:rms_norm", "file not found"),
    (f"{FIX}/numpy_norms.py:missing", "defines no 'missing'"),
    (f"{FIX}/numpy_norms.py:wrong_signature", "wrong_signature(x, eps) has the wrong signature for rms_norm: "
                                             "normdiff calls rms_norm(x, weight, eps)"),
    (f"{FIX}/numpy_norms.py:wrong_shape", "wrong-shaped output"),
    (f"{FIX}/numpy_norms.py:raises", "my norm is broken"),
    (f"{FIX}/imports_missing.py:rms_norm", "a_module_that_does_not_exist"),
    ("no_colon_here", "is not FILE.py:NAME"),
])
def test_broken_targets_exit_2_saying_why(target, message):
    code, result = check(target, "--op", "rms_norm", "--convention", "qwen3")
    assert code == 2 and result["verdict"] == "error"
    assert message in result["message"], result["message"]


def test_human_output_names_the_bug_and_the_fix(capsys):
    code = cli.main(["check", f"{FIX}/numpy_norms.py:rms_norm_gamma_plus_one", "--op", "rms_norm",
                     "--convention", "qwen3"])
    out = capsys.readouterr().out
    assert code == 1
    assert "looks like gamma-plus-one" in out
    assert "bug: gamma-plus-one -- fix: yours: (1 + w) as the scale (zero-centred storage); qwen3: w itself as the " \
           "scale (plain gamma)" in out
    assert "worst case:" in out and "reference" in out and "yours" in out


def test_the_text_gives_the_answer_first_and_its_repro_command_replays_the_disagreement(capsys):
    target = f"{FIX}/numpy_norms.py:rms_norm_eps_outside"
    code = cli.main(["check", target, "--op", "rms_norm", "--convention", "qwen3"])
    first = capsys.readouterr().out.splitlines()[:6]
    assert code == 1 and first[1].startswith("  DISAGREES:"), first
    assert first[2].startswith("  bug: eps-outside-sqrt -- fix: yours: eps outside the square root"), first
    (worst,) = [line for line in first if line.startswith("  worst case: ")]
    (repro,) = [line for line in first if line.startswith("  repro: ")]
    case_id = worst.removeprefix("  worst case: ").partition(": ")[0]
    command = repro.removeprefix("  repro: ")
    assert command.startswith(f"normdiff repro {case_id} --target {target}"), (worst, repro)
    proc = _normdiff(command)  # pasted as printed: it replays the worst case, which disagrees again
    assert proc.returncode == 1 and "outcome         disagree" in proc.stdout, proc.stdout + proc.stderr
    assert f"case            {case_id}\n" in proc.stdout


def test_checking_numpy_code_imports_no_framework():
    code = ("import sys; from normdiff.harness.commands import cli; "
            f"rc = cli.main(['check', '{FIX}/numpy_norms.py:rms_norm', '--op', 'rms_norm', '--convention', 'qwen3']); "
            "heavy = {'torch', 'jax', 'transformers'} & set(sys.modules); "
            "assert rc == 0 and not heavy, heavy")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_unknown_convention_is_a_usage_error():
    proc = subprocess.run([sys.executable, "-m", "normdiff.harness.commands.cli", "check", f"{FIX}/numpy_norms.py:rms_norm",
                           "--op", "rms_norm", "--convention", "qwen9"], capture_output=True, text=True)
    assert proc.returncode == 2 and "unknown convention 'qwen9'" in proc.stderr


def test_a_class_cannot_stand_for_qk_norm_rope():
    pytest.importorskip("torch")
    code, result = check(f"{FIX}/torch_module.py:MyRMSNorm", "--op", "qk_norm_rope", "--convention", "qwen3")
    assert code == 2 and "for qk_norm_rope give a function" in result["message"]


EPS = f"{FIX}/numpy_eps_bugs.py"


@pytest.mark.parametrize("name, op, convention, bug, fit", [
    # keras-hub #1472 / llama.cpp #2373: the eps argument ignored (1e-6 hard-coded)
    ("rms_norm_eps_ignored", "rms_norm", "qwen3", "eps-hardcoded", ("eps", "constant", 1e-6)),
    # keras ops.rms_normalization's default eps, 1e-7
    ("rms_norm_keras_default", "rms_norm", "qwen3", "eps-library-default", ("eps", "constant", 1e-7)),
    # coremltools #2821: an anti-overflow rescale turns eps into eps * max|x|^2
    ("rms_norm_rescaled", "rms_norm", "qwen3", "eps-rescaled-by-max", ("eps", "max_square", None)),
    # mlx-lm PR #1624: an L2 norm built from rms_norm, n * eps on the sum
    ("l2_norm_from_rms_norm", "l2_norm", "qwen3.5", "l2-eps-scaled-by-width", ("eps", "width", None)),
    # vLLM #3653: 1 + w stored in bf16 at load, a fixed per-channel error within 1.5 ulp elementwise
    ("rms_norm_offset_stored_in_dtype", "rms_norm", "qwen3.5", "offset-low-precision",
     ("scale", "1 + w rounded to the input dtype", None)),
])
def test_real_eps_and_scale_mistakes_are_flagged_and_named(name, op, convention, bug, fit):
    code, result = check(f"{EPS}:{name}", "--op", op, "--convention", convention)
    assert code == 1 and result["verdict"] == "disagrees"
    best = result["diagnosis"][0]
    assert best["bug"] == bug and best["convincing"], result["diagnosis"]
    kind, relation, value = fit
    fits = {f["kind"]: f for f in result["fits"]}
    assert fits[kind]["relation"] == relation, result["fits"]
    assert fits[kind]["matched"] >= 0.8 * fits[kind]["of"]
    if value is not None:
        assert fits[kind]["value"] == pytest.approx(value, rel=0.05)


def test_a_function_that_takes_its_eps_agrees_at_the_users_eps():
    code, result = check(f"{FIX}/numpy_norms.py:rms_norm", "--op", "rms_norm", "--convention", "qwen3", "--eps", "1e-5")
    assert code == 0, result
    # the one that hard-codes 1e-6 disagrees at the user's 1e-5 on more cases than at the config's
    _, at_config = check(f"{EPS}:rms_norm_eps_ignored", "--op", "rms_norm", "--convention", "qwen3")
    code, result = check(f"{EPS}:rms_norm_eps_ignored", "--op", "rms_norm", "--convention", "qwen3", "--eps", "1e-5")
    assert code == 1 and result["diagnosis"][0]["bug"] == "eps-hardcoded"
    assert result["cases"]["disagree"] > at_config["cases"]["disagree"] > 0


def test_cases_that_cannot_run_make_a_partial_verdict_naming_them():
    code, result = check(f"{FIX}/numpy_norms.py:rms_norm_without_bf16", "--op", "rms_norm", "--convention", "qwen3")
    assert code == 3 and result["verdict"] == "partial" and result["cases"]["disagree"] == 0
    (group,) = result["not_run"]
    assert group["dtype"] == "bfloat16" and "no bfloat16 kernel" in group["reason"] and group["cases"] > 10
    assert result["cases"]["error"] == group["cases"] and result["margin"]["of"] == result["cases"]["total"] - group["cases"]


def test_a_nan_disagreement_is_said_as_one(capsys):
    code = cli.main(["check", f"{FIX}/numpy_norms.py:rms_norm_no_eps", "--op", "rms_norm", "--convention", "qwen3"])
    out = capsys.readouterr().out
    assert code == 1 and "looks like eps-ignored" in out
    worst = next(line for line in out.splitlines() if "worst case:" in line)
    assert "nan_mismatch" in worst and "NaN and" in worst and "Inf in the output" in worst


def _normdiff(command: str, cwd=None):
    """A printed normdiff command, run as printed (`normdiff` is this interpreter's module)."""
    import shlex

    argv = shlex.split(command)
    assert argv[0] == "normdiff"
    return subprocess.run([sys.executable, "-m", "normdiff.harness.commands.cli", *argv[1:]], capture_output=True,
                          text=True, timeout=300, cwd=cwd)


def test_json_has_a_row_per_case_and_each_repro_replays_it():
    code, result = check(f"{FIX}/numpy_norms.py:rms_norm_eps_outside", "--op", "rms_norm", "--convention", "qwen3")
    rows = result["rows"]
    assert code == 1 and len(rows) == result["cases"]["total"] and len({r["case_id"] for r in rows}) == len(rows)
    assert {"case_id", "outcome", "max_ulp", "tolerance_ulp", "repro", "dtype", "regime", "eps", "headline", "pass",
            "output"} <= set(rows[0])
    from normdiff.cases.model import Case

    # each row says its pass and output, as its case does: nobody parses them out of the id
    assert all((r["pass"], r["output"]) == (Case.from_id(r["case_id"]).pass_, Case.from_id(r["case_id"]).output)
               for r in rows)
    # the worst case carries the command that replays it, the one its row carries
    by_id = {r["case_id"]: r for r in rows}
    assert result["worst_case"]["repro"] == by_id[result["worst_case"]["case_id"]]["repro"]
    assert result["worst_case"]["replay"].startswith("Case.from_id(")  # the old key is kept
    failing = [r for r in rows if r["outcome"] == "disagree"]
    assert len(failing) == result["cases"]["disagree"] and all(r["max_ulp"] > r["tolerance_ulp"] for r in failing)
    worst = max(failing, key=lambda r: r["max_ulp"])
    assert worst["repro"].startswith(f"normdiff repro {worst['case_id']} --target {FIX}/numpy_norms.py:rms_norm_eps_outside")
    proc = _normdiff(worst["repro"])
    assert proc.returncode == 1 and "outcome         disagree" in proc.stdout, proc.stdout + proc.stderr
    assert f"max_ulp {worst['max_ulp']:.6g}" in proc.stdout  # the same number the check measured
    passing = next(r for r in rows if r["outcome"] in ("identical", "agree"))
    assert _normdiff(passing["repro"]).returncode == 0


def test_out_writes_the_report_folder_of_a_run(tmp_path):
    out = tmp_path / "report"
    code, result = check(f"{FIX}/numpy_norms.py:rms_norm_gamma_plus_one", "--op", "rms_norm", "--convention", "qwen3",
                         "--out", str(out))
    assert code == 1 and result["report"] == str(out)
    assert {"results.csv", "summary.md", "report.html", "junit.xml"} <= {p.name for p in out.iterdir()}
    results = (out / "results.csv").read_text()
    assert results.count("\n") == result["cases"]["total"] + 1
    command = f"--target {FIX}/numpy_norms.py:rms_norm_gamma_plus_one"
    assert command in (out / "junit.xml").read_text() and command in (out / "summary.md").read_text()
    page = (out / "report.html").read_text().replace("<wbr>", "")  # case ids and commands may wrap at '/'
    assert command in page and "--implementation rms_norm_gamma_plus_one" not in page  # a live command, not a dead one


def test_dtype_and_regime_select_cases():
    code, result = check(f"{FIX}/numpy_norms.py:rms_norm", "--op", "rms_norm", "--convention", "qwen3",
                         "--dtype", "bf16", "--dtype", "float16", "--regime", "tiny_rms", "--regime", "normal")
    assert code == 0 and result["cases"]["total"] > 0
    assert {r["dtype"] for r in result["rows"]} == {"bfloat16", "float16"}
    assert {r["regime"].split(":")[0] for r in result["rows"]} == {"tiny_rms", "normal"}


@pytest.mark.parametrize("args, says", [
    (["--dtype", "float64"], "has no dtype 'float64' among its cases of the op; it has: bfloat16, float16, float32"),
    (["--dtype", "int8"], "unknown dtype 'int8'"),
    (["--regime", "tiny"], "unknown input regime 'tiny'"),
    (["--call", "f(x, weight, eps=eps"], "is not a call expression"),
])
def test_a_selection_or_template_nobody_can_run_is_a_usage_error(args, says):
    proc = subprocess.run([sys.executable, "-m", "normdiff.harness.commands.cli", "check", f"{FIX}/numpy_norms.py:rms_norm",
                           "--op", "rms_norm", "--convention", "qwen3", *args], capture_output=True, text=True)
    assert proc.returncode == 2 and says in proc.stderr, proc.stderr


def test_a_function_wrapping_f_layer_norm_shows_its_known_findings():
    """Known findings match by behaviour (engine/verdict.py): the wrapper gives F.layer_norm's bits on
    the cases where torch-F.layer_norm shows its findings, so it gets them, explanation and all; a
    LayerNorm of its own that errs on the same cases with other numbers does not."""
    code, result = check(f"{FIX}/torch_layer_norms.py:wraps_f_layer_norm", "--op", "layer_norm",
                         "--convention", "torch")
    assert code == 0 and result["verdict"] == "agrees", result["known_findings"]
    assert result["cases"]["known_finding"] >= 2 and result["cases"]["disagree"] == 0
    assert any("saves the mean and 1/std" in f["explanation"] for f in result["known_findings"])
    excused = [r for r in result["rows"] if r["known_finding"]]
    assert excused and all(r["outcome"] == "disagree" for r in excused)
    code, result = check(f"{FIX}/torch_layer_norms.py:in_input_dtype", "--op", "layer_norm", "--convention", "torch")
    assert code == 1 and result["verdict"] == "disagrees"
    assert result["cases"]["known_finding"] == 0 and result["known_findings"] == []


def test_a_write_into_the_input_is_a_failure_named_and_its_output_still_judged():
    """A call that writes into its input returned, and its output is judged; the write makes each
    case an error that carries the output's figures, the check disagrees (exit 1, not 'partial'), and
    the diagnosis names the write first."""
    code, result = check("tests/fixtures/hostile.py:mutates_input", "--op", "rms_norm", "--convention", "qwen3",
                         "--dtype", "float32")
    assert code == 1 and result["verdict"] == "disagrees" and result["not_run"] == []
    assert result["diagnosis"][0]["bug"] == "writes-into-input" and result["diagnosis"][0]["changes"] == {"inputs": ["x"]}
    row = result["rows"][0]
    assert row["outcome"] == "error" and "modified its input 'x' in place" in row["detail"]
    assert "its output" in row["detail"] and row["max_ulp"] is not None  # the output was judged


@pytest.mark.parametrize("target", ["layer_norm", "LayerNorm"])
def test_code_that_takes_no_eps_is_judged_at_the_conventions_eps_only(target):
    """A reference LayerNorm that writes its model's eps as a literal (a function without an eps
    parameter, a class without an eps argument) is right for its model: judged at the convention's
    eps only, and the check says so; code that takes eps and ignores it still disagrees."""
    code, result = check(f"{FIX}/literal_eps.py:{target}", "--op", "layer_norm", "--convention", "torch")
    assert code == 0 and result["verdict"] == "agrees", result["eps_note"]
    assert result["eps_note"].startswith("takes no eps: judged at 1e-05 only")
    assert {r["eps"] for r in result["rows"]} == {1e-05}
    code, result = check(f"{FIX}/literal_eps.py:ignores_eps", "--op", "layer_norm", "--convention", "torch")
    assert code == 1 and result["verdict"] == "disagrees" and result["eps_note"] == ""
    assert {r["eps"] for r in result["rows"] if r["outcome"] == "disagree"} != {1e-05}


@pytest.mark.parametrize("target", ["sibling_import/norm.py:rms_norm", "norm_package/layers/norm.py:rms_norm"])
def test_a_target_importing_its_sibling_or_its_package_works_from_another_folder(target, tmp_path):
    """Imported as Python imports it where it lies: a script's folder on the path (`from helpers
    import ...`), a package module by its dotted name (`from .maths import ...`), from any folder."""
    path = Path(FIX).resolve() / target.split(":")[0]
    proc = subprocess.run([sys.executable, "-m", "normdiff.harness.commands.cli", "check", f"{path}:rms_norm", "--op",
                           "rms_norm", "--convention", "olmo2", "--json"], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    result = json.loads(proc.stdout)
    assert proc.returncode == 0 and result["verdict"] == "agrees", result.get("message")


@pytest.mark.parametrize("target, op", [("torch.nn.functional:layer_norm", "layer_norm"),
                                        ("torch.nn.functional:rms_norm", "rms_norm")])
def test_torch_functional_norms_are_checked_as_they_are(target, op):
    """F.layer_norm(input, normalized_shape, weight, bias, eps): normalized_shape takes (dim,)."""
    pytest.importorskip("torch")
    code, result = check(target, "--op", op, "--convention", "torch", "--pass", "forward")
    assert code == 0 and result["verdict"] == "agrees", result.get("message")


def test_a_second_rounding_under_a_one_rounding_contract_disagrees_and_is_named():
    # every element within the old 2-ulp max budget; the chain (engine/chain.py) and the one-rounding
    # budget see it, and the diagnosis says the change in words
    code, result = check(f"{FIX}/rounding_chains.py:rounds_twice", "--op", "rms_norm", "--convention", "olmo2")
    assert code == 1 and result["verdict"] == "disagrees", result
    best = result["diagnosis"][0]
    assert "rounded to the input dtype before the weight multiply" in best["bug"] and best["matched"] == best["of"]
    code, result = check(f"{FIX}/rounding_chains.py:rounds_once", "--op", "rms_norm", "--convention", "olmo2")
    assert code == 0 and result["verdict"] == "agrees", result


@pytest.mark.parametrize("convention, verdict", [("vllm", "disagrees"), ("qwen3", "agrees")])
def test_a_fused_add_rounding_its_sum_first_is_judged_by_the_conventions_chain(convention, verdict):
    code, result = check(f"{FIX}/rounding_chains.py:add_rounds_sum_first", "--op", "add_rms_norm",
                         "--convention", convention)
    assert result["verdict"] == verdict, result
    if verdict == "disagrees":
        assert result["diagnosis"][0]["bug"] == "add-sum-rounded-first"


def test_a_module_without_a_bias_is_judged_with_the_identity_bias_only():
    # like code that takes no eps: nn.LayerNorm(bias=False) cannot be given a case's bias, and is
    # not wrong for its model; the cases with b=zeros judge it, and the output says so
    pytest.importorskip("torch")
    code, result = check("torch.nn:LayerNorm", "--op", "layer_norm", "--convention", "torch",
                         "--init", "Cls(dim, eps=eps, bias=False)", "--dtype", "bf16")
    assert code == 0 and result["verdict"] == "agrees", result
    assert result["operand_note"].startswith("takes no bias: judged with the identity only")
    assert all("/b=zeros" in row["case_id"] for row in result["rows"])


def test_a_second_rounding_no_change_names_is_said_as_a_rounding():
    # the L2 norm through an RMSNorm rounded to bf16, then scaled in it (mlx-lm's Kimi Linear): no
    # catalogued change is a weightless norm's extra rounding, and the answer says what it is
    proc = subprocess.run([sys.executable, "-m", "normdiff.harness.commands.cli", "check",
                           f"{FIX}/rounding_chains.py:l2_norm_rounded_then_scaled", "--op", "l2_norm",
                           "--convention", "qwen3.5"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    third = proc.stdout.splitlines()[2]
    assert third.startswith("  bug: no catalogued one; its outputs round where qwen3.5 does not"), proc.stdout


def text_check(*args) -> str:
    proc = subprocess.run([sys.executable, "-m", "normdiff.harness.commands.cli", "check", *args],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    return proc.stdout


def test_a_module_called_per_head_says_so_and_what_it_cannot_show():
    # a module class for qk_norm gets one head's vector: its caller's scope (a norm over all heads,
    # qk-norm-full-vector) cannot show, and check says how it called the module
    pytest.importorskip("torch")
    module = (f"{FIX}/torch_module.py:MyRMSNorm", "--dtype", "float32", "--pass", "forward")
    code, result = check(*module, "--op", "qk_norm", "--convention", "qwen3")
    assert code == 0 and result["call_note"].startswith(
        "called per head: your module receives x viewed as (..., heads, head_dim), one head's vector of head_dim "), result
    assert "a norm taken over all heads in the caller cannot show here" in result["call_note"]
    text = text_check(*module, "--op", "qk_norm", "--convention", "qwen3")
    assert "\n  " + result["call_note"] + "\n" in text
    # a function gets the whole row and num_heads, a module over rows the whole row: nothing hidden
    assert check(*module, "--op", "rms_norm", "--convention", "qwen3")[1]["call_note"] == ""
    function = check(f"{FIX}/numpy_norms.py:qk_norm_full_vector", "--op", "qk_norm", "--convention", "qwen3",
                     "--dtype", "float32")[1]
    assert function["call_note"] == "" and function["diagnosis"][0]["bug"] == "qk-norm-full-vector"


@pytest.mark.parametrize("target, framework", [(f"{FIX}/numpy_norms.py:rms_norm", "numpy"),
                                               (f"{FIX}/mlx_ports.py:rms_norm", "mlx")])
def test_a_forward_without_autograd_says_its_backward_was_not_checked(target, framework):
    pytest.importorskip(framework.replace("mlx", "mlx.core"))
    args = (target, "--op", "rms_norm", "--convention", "qwen3", "--dtype", "float32")
    code, result = check(*args)
    said = (f"backward not checked: {framework} code has no autograd here; give an explicit backward, a function "
            "whose first parameter is dy (rms_norm_backward(dy, x, weight, eps) -> (dx, dw)), and check it with "
            "--pass backward")
    assert code == 0 and result["backward_note"] == said, result
    assert all(row["pass"] == "forward" for row in result["rows"])
    assert "\n  " + said + "\n" in text_check(*args)
    # asked for the forward only, nothing was left out
    assert check(*args, "--pass", "forward")[1]["backward_note"] == ""


def test_a_forward_normdiff_differentiates_has_no_backward_note():
    pytest.importorskip("torch")
    code, result = check("torch.nn.functional:rms_norm", "--op", "rms_norm", "--convention", "torch",
                         "--call", "f(x, (dim,), weight=weight, eps=eps)", "--dtype", "float32")
    assert result["backward_note"] == "" and {row["pass"] for row in result["rows"]} == {"forward", "backward"}, result
