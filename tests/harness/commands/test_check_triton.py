"""`normdiff check` on Triton kernels, run on the CPU by Triton's interpreter under normdiff's
faithful layer (implementations/triton_interpreter.py): a correct RMSNorm kernel agrees, forward and
backward, with rows wider than its block too; eps outside the root, a mask that lets a row's padding
into its mean, and a backward that accumulates dw in bf16 are each named; Liger-Kernel's own RMSNorm
agrees with its convention (its casting modes are registered implementations too), and
flash-linear-attention's norm kernels with theirs."""
import importlib.util
import sys
from pathlib import Path

import pytest

from normdiff.harness.commands import check
from normdiff.harness.commands.usercode import user_implementation

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                                reason="triton not installed (pip install 'normdiff[triton]')")
FIX = "tests/fixtures/user/triton_norms.py"
# a few cases: the interpreter runs a kernel program by program (a `check` of the default suite takes
# ~20 s; its time is in docs/triton.md)
SUITE = "tests/fixtures/suites/triton_small.toml"


def checked(target: str, convention: str = "qwen3", passes: str = "forward", call: str = "", op: str = "rms_norm"):
    impl = user_implementation(target if ":" in target else f"{FIX}:{target}", op, convention, None, call=call)
    return check.check(impl, suite=SUITE, timeout=120, passes=passes)


def test_a_triton_file_is_run_by_the_triton_framework():
    impl = user_implementation(f"{FIX}:rms_norm", "rms_norm", "qwen3", None)
    assert impl.framework == "triton"


@pytest.mark.parametrize("target", ["rms_norm", "rms_norm_blocks_of_64"])
def test_a_correct_kernel_agrees_forward_and_backward(target):
    result = checked(target, passes="both")
    assert result.verdict == "agrees", result.message


@pytest.mark.parametrize("target, bug", [
    ("rms_norm_eps_outside", "eps-outside-sqrt"),
    ("rms_norm_mask_bug", "masked-tail"),  # right at 4x256, wrong at 4x200
    ("rms_norm_load_unmasked", "masked-tail"),  # the next row's elements; NaN past the end of x
])
def test_each_forward_bug_is_caught(target, bug):
    result = checked(target)
    assert result.verdict == "disagrees", result.message
    if bug:
        assert result.bug == bug, check.describe(result, target)


@pytest.mark.parametrize("target, verdict, bug", [("rms_norm", "agrees", ""), ("rms_norm_mask_bug", "disagrees", "masked-tail")])
def test_the_kernel_suite_tells_a_masked_tail_by_its_power_of_two_twins(target, verdict, bug):
    impl = user_implementation(f"{FIX}:{target}", "rms_norm", "qwen3", None)
    result = check.check(impl, suite="kernel", timeout=120, passes="forward", dtypes=("float32",), regimes=("normal",))
    assert {r["case_id"].split("/")[2] for r in result.rows} >= {"1x4097", "67x1025", "67x3072", "67x1024"}
    assert result.verdict == verdict and result.bug == bug, check.describe(result, target)


def test_a_dw_accumulated_in_bf16_is_caught_in_the_backward():
    result = checked("rms_norm_dw_bf16", passes="both")
    assert result.verdict == "disagrees", result.message


def test_a_store_past_the_end_of_its_output_is_refused_naming_the_program_and_tensor():
    result = checked("rms_norm_store_unmasked")  # harmless-looking where the allocator rounds up
    reasons = {r["reason"] for r in result.not_run}
    assert result.verdict != "agrees" and all("past the end of Y" in r and "OutOfBounds" in r for r in reasons), reasons
    assert {r["dtype"] for r in result.not_run} == {"float32", "bfloat16"}  # 4x200: the last row's block


def test_host_code_written_for_a_gpu_runs_and_a_read_of_memory_never_written_is_nan():
    # device="cuda" allocations, a grid given as a list, atomics into per-group partial rows
    assert checked("rms_norm_dw_groups", passes="both").verdict == "agrees"
    # the partials made with torch.empty: the groups no row reached (4 or 8 rows, 16 groups) are summed
    result = checked("rms_norm_dw_groups_empty", passes="both")
    bad = [r for r in result.rows if r["outcome"] not in ("agree", "identical")]
    assert result.verdict == "disagrees" and bad and all(r["case_id"].endswith("out=dw") for r in bad)
    assert all(r["outcome"] == "nan_mismatch" for r in bad)


LIGER = "liger_kernel.ops.rms_norm:LigerRMSNormFunction.apply"


@pytest.mark.skipif(importlib.util.find_spec("liger_kernel") is None, reason="liger-kernel not installed")
@pytest.mark.parametrize("convention, offset, mode, verdict", [
    ("qwen3", 0.0, "llama", "agrees"),  # x * rstd rounded to the input dtype, then times w in it
    # (gemma, everything in float32 with (1 + w): registered, tests/implementations/test_triton_kernels.py)
    ("qwen3", 0.0, "none", "disagrees"),  # by design: x * x, its sum and rsqrt in the input dtype
])
def test_ligers_rms_norm_checked_as_a_user_calls_it_forward_and_backward(convention, offset, mode, verdict):
    result = checked(LIGER, convention, passes="both", call=f"f(x, weight, eps, {offset}, '{mode}', False)")
    assert result.verdict == verdict, result.message


# fla-core is installed beside the environment, not in it (the Makefile says why): its checks see it
# on PYTHONPATH, as a user's would
KERNELS = Path(sys.prefix) / "kernels"


@pytest.mark.skipif(not (KERNELS / "fla").is_dir(), reason=f"fla-core not installed in {KERNELS} (make install)")
@pytest.mark.parametrize("target, op, convention, call", [
    # (each of fla's norms agrees as a registered implementation too: tests/implementations/test_triton_kernels.py)
    ("fla.modules.norm.layernorm:rms_norm", "rms_norm", "qwen3", "f(x, weight, None, eps=eps)"),
    # Mamba2's gated norm (fla's copy of mamba_ssm's layernorm_gated): the gate before the norm
    ("fla.modules.norm.layernorm_gated:rmsnorm_fn", "group_gated_rms_norm", "mamba2",
     "f(x, weight, None, z=gate, eps=eps, group_size=group_size, norm_before_gate=False)"),
])
def test_flash_linear_attentions_norm_kernels_agree_forward_and_backward(monkeypatch, target, op, convention, call):
    monkeypatch.syspath_prepend(str(KERNELS))  # the target is found here, and run in a worker that
    monkeypatch.setenv("PYTHONPATH", str(KERNELS))  # imports it from there
    result = checked(target, convention, passes="both", call=call, op=op)
    assert result.verdict == "agrees", result.message
    assert not result.backward_note and {r["pass"] for r in result.rows} == {"forward", "backward"}
