"""A Triton check's device section (harness/commands/on_device.py): the same code compiled on a GPU
beside the interpreter's run where a GPU is present, and why not where none is; the side by side of
two runs' outputs, measured in ULPs of each case's output format."""
import importlib.util

import numpy as np
import pytest

from normdiff.cases import suites
from normdiff.harness.commands import check, on_device
from normdiff.harness.commands.usercode import user_implementation
from normdiff.implementations.frameworks import get_framework

FIX = "tests/fixtures/user/triton_norms.py:rms_norm"
SUITE = "tests/fixtures/suites/triton_small.toml"
NO_GPU = get_framework("triton_gpu").missing()
needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton not installed")


def test_the_twin_is_the_same_code_compiled_and_only_triton_code_has_one():
    impl = user_implementation(FIX, "rms_norm", "qwen3", "triton")
    twin = on_device.device_twin(impl)
    assert (twin.framework, twin.target.framework, twin.target.text) == ("triton_gpu", "triton_gpu", impl.target.text)
    assert on_device.device_twin(user_implementation("tests/fixtures/user/numpy_norms.py:rms_norm", "rms_norm",
                                                     "qwen3", None)) is None


@needs_triton
@pytest.mark.skipif(NO_GPU is None, reason="a GPU is here: the compiled run is tested below")
def test_without_a_gpu_a_triton_check_says_why_it_did_not_run_there():
    result = check.check(user_implementation(FIX, "rms_norm", "qwen3", None), suite=SUITE, passes="forward")
    assert result.device == {"skipped": NO_GPU} and "no GPU here" in NO_GPU
    assert "on a GPU: not run (no GPU here" in check.describe(result, FIX)
    assert result.as_dict()["device"] == result.device


@needs_triton
@pytest.mark.skipif(NO_GPU is not None, reason=f"needs a GPU: {NO_GPU}")
def test_on_a_gpu_the_compiled_kernel_agrees_and_sits_beside_the_interpreter():
    result = check.check(user_implementation(FIX, "rms_norm", "qwen3", None), suite=SUITE)
    device = result.device
    assert device["verdict"] == "agrees" and device["compared"] == result.cases["total"]
    assert device["bit_identical"] >= 1 and (not device["worst"] or device["worst"]["ulp_apart"] <= 2)


def test_the_side_by_side_counts_identical_cases_and_measures_the_worst_in_ulps():
    cases = suites.load(SUITE)
    a, b, c = [case for case in cases.cases if case.dtype == "bfloat16"][:3]
    x = np.ones((4, 8), dtype=np.float32)
    one_ulp = x.copy()
    one_ulp[0, 0] = np.nextafter(np.float32(1.0), np.float32(2.0))  # 1 + 2^-23: far below a bf16 ulp
    nan = x.copy()
    nan[1, 1] = np.nan
    interpreted = {(a.id, "k"): x, (b.id, "k"): x, (c.id, "k"): x}
    compiled = {(a.id, "k@gpu"): x.copy(), (b.id, "k@gpu"): one_ulp, (c.id, "k@gpu"): nan}
    side = on_device.side_by_side(interpreted, compiled, "k", "k@gpu", cases)
    assert side["compared"] == 3 and side["bit_identical"] == 1
    assert side["worst"] == {"case": c.id, "ulp_apart": float("inf")}  # a NaN one run has and the other not
    del compiled[(c.id, "k@gpu")]
    side = on_device.side_by_side(interpreted, compiled, "k", "k@gpu", cases)
    assert side["compared"] == 2 and side["worst"]["case"] == b.id and 0 < side["worst"]["ulp_apart"] < 0.01
