"""`normdiff check` on a user's quantizing RMSNorm (NumPy, tests/fixtures/user/quant_norms.py): a
correct one agrees, and each bug the issue names is named: the scale taken before the weight, no
saturation, an FNUZ max used for an FN output, an E8M0 scale rounded down, groups of the wrong width;
and under a per-tensor scale the caller gives (rms_norm_quant_static, vLLM's argument names): a
static scale multiplied where it divides, an NVFP4 block scale cast without its clamp."""
import pytest

from normdiff.harness.commands import check
from normdiff.harness.commands.usercode import user_implementation

FIX = "tests/fixtures/user/quant_norms.py"


def checked(target: str, convention: str, op: str = "rms_norm_quant"):
    impl = user_implementation(f"{FIX}:{target}", op, convention, None)
    return check.check(impl, timeout=120)


@pytest.mark.parametrize("target,convention", [("rms_norm_fp8", "sglang-fp8"), ("mxfp8", "mxfp8")])
def test_a_correct_quantizing_norm_agrees(target, convention):
    result = checked(target, convention)
    assert result.verdict == "agrees", result.message
    assert "float8_e4m3fn" in check.describe(result, target)


@pytest.mark.parametrize("target,convention,bug", [
    ("scale_before_weight", "sglang-fp8", "quant-scale-before-weight"),
    ("fnuz_max_for_fn", "sglang-fp8", "quant-fnuz-max-for-fn"),
    ("mxfp8_e8m0_rounded_down", "mxfp8", "quant-e8m0-rounded-down"),
    ("mxfp8_ocp_unclamped", "ocp-mxfp8", "quant-no-saturation"),
])
def test_each_named_bug_is_named(target, convention, bug):
    result = checked(target, convention)
    assert result.verdict == "disagrees" and result.bug == bug, check.describe(result, target)


def test_groups_of_the_wrong_width_are_said_as_such():
    result = checked("groups_of_64", "vllm-fp8-group")
    assert result.verdict == "disagrees"
    line = check.bug_line(result)
    assert "one scale per group of 64 columns, where vllm-fp8-group has one scale per group of 128" in line, line


@pytest.mark.parametrize("target,convention,bug", [
    ("static_fp8", "flashinfer-fp8-static", None),
    ("static_fp8_multiplied", "flashinfer-fp8-static", "quant-static-scale-multiplied"),
    ("nvfp4", "nvfp4", None),
    ("nvfp4_scale_unclamped", "nvfp4", "quant-nvfp4-scale-unclamped"),
])
def test_under_a_given_per_tensor_scale(target, convention, bug):
    """f(input, weight, scale, epsilon) as vLLM names them: `scale` is the tensor's scale (the weight
    is `weight`); NVFP4's block scales come back as float8_e4m3fn."""
    result = checked(target, convention, "rms_norm_quant_static")
    if bug is None:
        assert result.verdict == "agrees", result.message
    else:
        assert result.verdict == "disagrees" and result.bug == bug, check.describe(result, target)
