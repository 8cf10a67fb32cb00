"""`normdiff check` in the user's framework, each in one command line: library functions and classes
targeted as Python resolves them (mlx.core.fast:rms_norm, keras.ops:rms_normalization,
keras.layers:RMSNormalization, flax.nnx:RMSNorm, tinygrad.nn:RMSNorm), an onnxruntime graph built
with onnx.helper, a torch module whose gain is `scale`. Each agrees when correct, and a broken copy
(a port's typical mistake) disagrees with the right diagnosis. A framework not installed here skips
its tests, saying which extra installs it; tinygrad also needs clang >= 16 (`make` installs it
where it can)."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from normdiff.cases.suites import for_pass
from normdiff.harness.commands.check import check_suite
from normdiff.implementations.frameworks import FRAMEWORKS

FIX = "tests/fixtures/user"


def needs(framework: str):
    record = FRAMEWORKS[framework]
    missing = [m for m in record.modules if importlib.util.find_spec(m) is None]
    reason = (f"{', '.join(missing)} not installed (pip install 'normdiff[{record.extra}]')" if missing
              else record.missing())
    return pytest.mark.skipif(bool(reason), reason=reason or "")


def check(*args):
    proc = subprocess.run([sys.executable, "-m", "normdiff.harness.commands.cli", "check", *args, "--json"],
                          capture_output=True, text=True, timeout=600)
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, proc.stdout + proc.stderr
    return proc.returncode, json.loads(lines[0])


def suite_cases(passes: str, framework: str = "torch", dtypes=()) -> int:
    """How many rms_norm cases of the default suite `check` runs in that pass (any convention: check
    re-targets them all), of `dtypes` (default all); a framework without strides runs none of the
    layout cases."""
    cases = for_pass(check_suite("default", "rms_norm", "qwen3", dtypes=dtypes), passes).cases
    return len([c for c in cases if FRAMEWORKS[framework].strides or c.layout == "contiguous"])


def agrees(result, framework, dtypes=()):
    assert result["verdict"] == "agrees" and result["framework"] == framework, result["message"] or result["cases"]
    # every case ran (every dtype: bf16 crossed both ways); torch code (a module class too) also
    # runs the backward pass (dx and dw of each backward call). The JAX target checked here is flax's
    # class, which normdiff does not differentiate: the forward only.
    total = suite_cases("forward", framework, dtypes) + (suite_cases("backward", dtypes=dtypes) if framework == "torch" else 0)
    assert result["cases"]["agree"] == result["cases"]["total"] == total
    assert result["margin"]["worst_ulp"] <= result["margin"]["budget_ulp"]


def diagnosed(result, bug):
    assert result["verdict"] == "disagrees", result["cases"]
    best = result["diagnosis"][0]
    assert best["bug"] == bug and best["convincing"], result["diagnosis"]


# target and options, convention, framework: a correct library norm (or a correct port) agrees
AGREES = [
    pytest.param(["mlx.core.fast:rms_norm"], "qwen3", "mlx", marks=needs("mlx"), id="mlx-fast"),
    # keras multiplies in float32 and rounds once: OLMo2's order
    # keras compiles every shape and dtype (eager on JAX): bf16 alone, where the rounding order shows
    pytest.param(["keras.ops:rms_normalization", "--call", "f(x, scale=weight, axis=-1, epsilon=eps)",
                  "--dtype", "bfloat16"], "olmo2", "keras", marks=needs("keras"), id="keras-ops-call"),
    pytest.param(["keras.layers:RMSNormalization", "--init", "Cls(epsilon=eps, dtype=dtype_name)", "--dtype",
                  "bfloat16"], "olmo2", "keras", marks=needs("keras"), id="keras-layer-init"),
    # tinygrad compiles every kernel with clang (60 s for every dtype here): bf16 alone, where its casts show
    pytest.param(["tinygrad.nn:RMSNorm", "--dtype", "bfloat16"], "qwen3", "tinygrad", marks=needs("tinygrad"),
                 id="tinygrad-module"),
    pytest.param([f"{FIX}/torch_module.py:ScaleRMSNorm"], "qwen3", "torch", marks=needs("torch"), id="torch-scale"),
]
# target and options, convention, the bug a porter's typical mistake must be named as
BROKEN = [
    pytest.param([f"{FIX}/mlx_ports.py:rms_norm_gamma_plus_one"], "qwen3", "gamma-plus-one", marks=needs("mlx"),
                 id="mlx-gamma-plus-one"),
    # a template that forgets epsilon: keras then uses its default, 1e-7
    pytest.param(["keras.ops:rms_normalization", "--call", "f(x, scale=weight, axis=-1)", "--dtype", "float32"],
                 "olmo2", "eps-library-default", marks=needs("keras"), id="keras-ops-no-epsilon"),
    # a layer built without the model's eps: keras' 1e-6 where Llama's says 1e-5 (judged at that eps only: it takes none)
    pytest.param(["keras.layers:RMSNormalization", "--init", "Cls()", "--dtype", "float32"], "llama", "eps-hardcoded",
                 marks=needs("keras"),
                 id="keras-layer-default-eps"),
    pytest.param([f"{FIX}/tinygrad_ports.py:RMSNormEpsOutside", "--dtype", "float32"], "qwen3", "eps-outside-sqrt",
                 marks=needs("tinygrad"),
                 id="tinygrad-eps-outside"),
    pytest.param([f"{FIX}/torch_module.py:ScaleRMSNormGammaPlusOne"], "qwen3", "gamma-plus-one", marks=needs("torch"),
                 id="torch-scale-gamma-plus-one"),
]


@pytest.mark.parametrize("target, convention, framework", AGREES)
def test_a_correct_norm_agrees_in_its_framework(target, convention, framework):
    code, result = check(*target, "--op", "rms_norm", "--convention", convention)
    assert code == 0
    agrees(result, framework, [target[i + 1] for i, a in enumerate(target) if a == "--dtype"])
    if "dtype=dtype_name" in " ".join(target):
        assert result["output_dtype"] == ""  # built in the case dtype, it returns it


@pytest.mark.parametrize("target, convention, bug", BROKEN)
def test_a_broken_copy_is_named(target, convention, bug):
    code, result = check(*target, "--op", "rms_norm", "--convention", convention)
    assert code == 1
    diagnosed(result, bug)
    eps = {"eps-library-default": 1e-7, "eps-hardcoded": 1e-6}.get(bug)
    if eps:
        assert result["fits"][0]["value"] == pytest.approx(eps, rel=0.05)


@needs("onnxruntime")
def test_onnx_graph_from_a_function_agrees_where_onnxruntime_has_kernels():
    # Llama's order multiplies in bf16: onnxruntime's CPU provider has no bf16 Mul, so bf16 is partial
    code, result = check(f"{FIX}/onnx_norms.py:rms_norm", "--op", "rms_norm", "--convention", "qwen3")
    assert code == 3 and result["verdict"] == "partial" and result["cases"]["disagree"] == 0
    (group,) = result["not_run"]
    assert group["dtype"] == "bfloat16" and "Could not find an implementation for Mul" in group["reason"]
    # OLMo2's order multiplies in float32 and casts once: bf16 crosses io_binding both ways and agrees
    code, result = check(f"{FIX}/onnx_norms.py:rms_norm_weight_in_float", "--op", "rms_norm", "--convention", "olmo2")
    assert code == 0
    agrees(result, "onnxruntime")


@needs("onnxruntime")
def test_onnx_graph_with_eps_outside_the_root():
    code, result = check(f"{FIX}/onnx_norms.py:rms_norm_eps_outside", "--op", "rms_norm", "--convention", "qwen3",
                         "--dtype", "float32", "--dtype", "float16")
    assert code == 1 and result["not_run"] == []
    diagnosed(result, "eps-outside-sqrt")


@needs("onnxruntime")
def test_an_onnx_file_is_fed_its_dtype_and_bakes_its_eps(tmp_path):
    sys.path.insert(0, FIX)
    try:
        import onnx_norms
    finally:
        sys.path.remove(FIX)
    path = tmp_path / "exported.onnx"
    onnx_norms.save_float32(str(path), eps=1e-6)
    code, result = check(str(path), "--op", "rms_norm", "--convention", "qwen3", "--dtype", "float32")
    # an exported graph holds its eps as a constant: the cases at eps 1e-5 show it
    assert code == 1 and {r["eps"] for r in result["rows"] if r["outcome"] == "disagree"} == {1e-5}
    diagnosed(result, "eps-hardcoded")
    code, result = check(str(path), "--op", "rms_norm", "--convention", "qwen3", "--dtype", "float16", "--eps", "1e-6",
                         "--regime", "normal")
    assert code == 2 and "graph input 'x' is float32; this case is float16" in result["message"]


@needs("jax")
def test_flax_nnx_rms_norm():
    if importlib.util.find_spec("flax") is None:
        pytest.skip("flax is not installed (pip install 'normdiff[flax]')")
    code, result = check("flax.nnx:RMSNorm", "--op", "rms_norm", "--convention", "olmo2", "--dtype", "bfloat16")
    assert code == 0 and "float32 for bfloat16 input" in result["output_dtype"]  # flax promotes to its param dtype
    agrees(result, "jax", ["bfloat16"])


@needs("jax")
def test_flax_nnx_module_with_its_statistic_in_the_input_dtype():
    if importlib.util.find_spec("flax") is None:
        pytest.skip("flax is not installed (pip install 'normdiff[flax]')")
    code, result = check(f"{FIX}/flax_ports.py:RMSNormInDtype", "--op", "rms_norm", "--convention", "qwen3",
                         "--dtype", "bfloat16")
    assert code == 1
    best = result["diagnosis"][0]
    assert best["bug"] == "stats-low-precision", result["diagnosis"]


@needs("keras")
def test_keras_layer_applied_per_head():
    code, result = check("keras.layers:RMSNormalization", "--op", "qk_norm", "--convention", "qwen3",
                         "--init", "Cls(epsilon=eps, dtype=dtype_name)", "--dtype", "bfloat16")
    assert code == 0, result["cases"]


def test_a_framework_mismatch_suggests_the_framework_that_runs_it(tmp_path):
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    path = tmp_path / "numpy_inside.py"
    path.write_text("import numpy as np\nimport torch\n\n\ndef f(x, weight, eps):\n"
                    "    t = torch.from_numpy(np.asarray(x, dtype=np.float32))\n"
                    "    y = (t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + eps)).numpy()\n"
                    "    return (y * np.asarray(weight, dtype=np.float32)).astype(x.dtype)\n")
    code, result = check(f"{path}:f", "--op", "rms_norm", "--convention", "olmo2", "--regime", "normal")
    assert code == 2 and "runs on numpy arrays: say so with --framework numpy" in result["message"]
    code, result = check(f"{path}:f", "--op", "rms_norm", "--convention", "olmo2", "--regime", "normal",
                         "--framework", "numpy")
    assert code == 0, result


def test_keras_is_run_on_the_backend_configured():
    if importlib.util.find_spec("keras") is None or importlib.util.find_spec("torch") is None:
        pytest.skip("keras and torch are not both installed")
    env = {**os.environ, "KERAS_BACKEND": "torch"}
    proc = subprocess.run([sys.executable, "-m", "normdiff.harness.commands.cli", "check", "keras.ops:rms_normalization",
                           "--op", "rms_norm", "--convention", "olmo2", "--regime", "normal", "--dtype", "bfloat16", "--json"],
                          capture_output=True, text=True, timeout=600, env=env)
    result = json.loads(proc.stdout)
    assert proc.returncode == 0 and result["verdict"] == "agrees", result


# ---- JAX's module systems, called as their frameworks call them (implementations/jax_modules.py) ----

def _jax_library(module: str):
    """Skip where an optional JAX module library is not installed."""
    return pytest.mark.skipif(importlib.util.find_spec("jax") is None or importlib.util.find_spec(module) is None,
                              reason=f"{module} is not installed (pip install 'normdiff[jax-modules]')")


@_jax_library("equinox")
def test_equinox_rms_norm_is_vmapped_and_agrees():
    # built as RMSNorm(shape=dim, eps=eps), called one row at a time through jax.vmap
    code, result = check("equinox.nn:RMSNorm", "--op", "rms_norm", "--convention", "olmo2", "--dtype", "bfloat16")
    assert code == 0
    agrees(result, "jax", ["bfloat16"])


@_jax_library("flax")
def test_flax_linen_layer_norm_is_initialised_and_applied_and_agrees():
    code, result = check("flax.linen:LayerNorm", "--op", "layer_norm", "--convention", "torch", "--dtype", "bfloat16",
                         "--init", "Cls(epsilon=eps, use_fast_variance=False)")
    assert code == 0 and result["verdict"] == "agrees", result["message"] or result["cases"]
    assert result["cases"]["agree"] == result["cases"]["total"] > 0
    assert "float32 for bfloat16 input" in result["output_dtype"]  # linen's float32 params promote


LINEN_EPS_OUTSIDE = '''
import flax.linen as nn
import jax.numpy as jnp


class RMSNorm(nn.Module):
    epsilon: float = 1e-6

    @nn.compact
    def __call__(self, x):
        scale = self.param("scale", nn.initializers.ones, (x.shape[-1],))
        xf = x.astype(jnp.float32)
        rms = jnp.sqrt(jnp.mean(xf * xf, axis=-1, keepdims=True))
        return (xf / (rms + self.epsilon) * scale).astype(x.dtype)  # the bug: eps outside the root
'''

HAIKU_EPS_OUTSIDE = '''
import haiku as hk
import jax.numpy as jnp


class RMSNorm(hk.Module):
    def __init__(self, eps=1e-5, name=None):
        super().__init__(name=name)
        self.eps = eps

    def __call__(self, x):
        scale = hk.get_parameter("scale", (x.shape[-1],), jnp.float32, init=jnp.ones)
        xf = x.astype(jnp.float32)
        rms = jnp.sqrt(jnp.mean(xf * xf, axis=-1, keepdims=True))
        return (xf / (rms + self.eps) * scale).astype(x.dtype)  # the bug: eps outside the root
'''


@pytest.mark.parametrize("library, source", [("flax", LINEN_EPS_OUTSIDE), ("haiku", HAIKU_EPS_OUTSIDE)])
def test_a_user_module_with_eps_outside_the_root_disagrees(tmp_path, library, source):
    if importlib.util.find_spec("jax") is None or importlib.util.find_spec(library) is None:
        pytest.skip(f"{library} is not installed (pip install 'normdiff[jax-modules]')")
    path = tmp_path / "my_norm.py"
    path.write_text(source)
    code, result = check(f"{path}:RMSNorm", "--op", "rms_norm", "--convention", "olmo2", "--dtype", "float32")
    assert code == 1 and result["framework"] == "jax"
    diagnosed(result, "eps-outside-sqrt")
