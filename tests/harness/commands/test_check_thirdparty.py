"""Correct third-party norms agree and a broken copy of each is named: MLX on the CPU and keras 3
(JAX backend), through thin NumPy wrappers (tests/fixtures/thirdparty/), checked with
`--framework numpy`: a file that imports a framework but takes NumPy arrays is run as the user says
(test_check_frameworks.py checks the same libraries called as they are). Both are installed by
`make` (the mlx and keras extras); a machine that cannot install one skips its tests, saying so."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

THIRD = "tests/fixtures/thirdparty"
# looked up, not imported: the checks import them in their own worker
needs_mlx = pytest.mark.skipif(importlib.util.find_spec("mlx") is None,
                               reason="mlx[cpu] is not installed (pip install 'normdiff[mlx]')")
needs_keras = pytest.mark.skipif(importlib.util.find_spec("keras") is None,
                                 reason="keras is not installed (pip install 'normdiff[keras]')")


def check(*args):
    proc = subprocess.run([sys.executable, "-m", "normdiff.harness.commands.cli", "check", *args, "--framework", "numpy",
                           "--json"],
                          capture_output=True, text=True, timeout=600)
    return proc.returncode, json.loads(proc.stdout.strip().splitlines()[-1])


@needs_mlx
@pytest.mark.parametrize("name", ["fast_rms_norm", "nn_rms_norm"])
def test_mlx_rms_norm_agrees_under_the_llama_cast(name):
    # MLX rounds x * rsqrt to the output dtype, then multiplies by w in it: the Llama cast (mlx/fast.cpp)
    code, result = check(f"{THIRD}/mlx_norms.py:{name}", "--op", "rms_norm", "--convention", "qwen3")
    assert code == 0 and result["verdict"] == "agrees", result
    assert result["margin"]["worst_ulp"] <= result["margin"]["budget_ulp"]


@needs_mlx
def test_mlx_with_its_layer_default_eps_is_named():
    code, result = check(f"{THIRD}/mlx_norms.py:fast_rms_norm_default_eps", "--op", "rms_norm", "--convention", "qwen3")
    assert code == 1 and result["diagnosis"][0]["bug"] == "eps-wrong-value"
    assert {f["relation"] for f in result["fits"]} == {"constant"} and result["fits"][0]["value"] == pytest.approx(1e-5)


@needs_keras
@pytest.mark.parametrize("name, dtype_note", [("ops_rms_normalization", ""), ("layer_rms_normalization_in_dtype", ""),
                                              ("layer_rms_normalization", "returns float32 for bfloat16 input")])
def test_keras_rms_normalization_agrees_with_one_rounding(name, dtype_note):
    # keras multiplies in float32 and rounds once (keras/src/ops/nn.py): OLMo2's and torch's order
    # bf16 alone: keras compiles every shape and dtype, and bf16 is where a rounding order shows
    code, result = check(f"{THIRD}/keras_norms.py:{name}", "--op", "rms_norm", "--convention", "olmo2",
                         "--dtype", "bfloat16")
    assert code == 0 and result["verdict"] == "agrees", result
    assert dtype_note in result["output_dtype"]  # the layer's default policy promotes, and it is said


@needs_keras
def test_keras_with_its_default_epsilon_is_named():
    code, result = check(f"{THIRD}/keras_norms.py:ops_rms_normalization_default_eps", "--op", "rms_norm",
                         "--convention", "olmo2", "--dtype", "float32")
    assert code == 1 and result["diagnosis"][0]["bug"] == "eps-library-default"
    assert result["fits"][0]["value"] == pytest.approx(1e-7)
