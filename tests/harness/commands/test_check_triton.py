"""`normdiff check` on Triton kernels, run on the CPU by Triton's interpreter under normdiff's
faithful layer (implementations/triton_interpreter.py): a correct RMSNorm kernel agrees, forward and
backward, with rows wider than its block too; eps outside the root, a mask that lets a row's padding
into its mean, and a backward that accumulates dw in bf16 are each named; Liger-Kernel's own RMSNorm
agrees with its convention in each casting mode."""
import importlib.util

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
])
def test_each_forward_bug_is_caught(target, bug):
    result = checked(target)
    assert result.verdict == "disagrees", result.message
    if bug:
        assert result.bug == bug, check.describe(result, target)


def test_a_dw_accumulated_in_bf16_is_caught_in_the_backward():
    result = checked("rms_norm_dw_bf16", passes="both")
    assert result.verdict == "disagrees", result.message


LIGER = "liger_kernel.ops.rms_norm:LigerRMSNormFunction.apply"


@pytest.mark.skipif(importlib.util.find_spec("liger_kernel") is None, reason="liger-kernel not installed")
@pytest.mark.parametrize("convention, offset, mode, verdict", [
    ("qwen3", 0.0, "llama", "agrees"),  # x * rstd rounded to the input dtype, then times w in it
    ("gemma3", 1.0, "gemma", "agrees"),  # everything in float32 with (1 + w), rounded once
    ("qwen3", 0.0, "none", "disagrees"),  # by design: x * x, its sum and rsqrt in the input dtype
])
def test_ligers_rms_norm_in_each_casting_mode_forward_and_backward(convention, offset, mode, verdict):
    result = checked(LIGER, convention, passes="both", call=f"f(x, weight, eps, {offset}, '{mode}', False)")
    assert result.verdict == verdict, result.message
