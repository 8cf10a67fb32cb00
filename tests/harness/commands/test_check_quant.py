"""`normdiff check` on a user's quantizing RMSNorm (NumPy, tests/fixtures/user/quant_norms.py): a
correct one agrees, and each bug the issue names is named: the scale taken before the weight, no
saturation, an FNUZ max used for an FN output, an E8M0 scale rounded down, groups of the wrong width."""
import pytest

from normdiff.harness.commands import check
from normdiff.harness.commands.usercode import user_implementation

FIX = "tests/fixtures/user/quant_norms.py"


def checked(target: str, convention: str):
    impl = user_implementation(f"{FIX}:{target}", "rms_norm_quant", convention, None)
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
