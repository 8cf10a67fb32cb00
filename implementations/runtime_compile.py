"""torch.compile (the inductor backend, CPU) of modules normdiff already runs eagerly: our own
torch modules (torch_own.py's `prepare` / `forward`) and HF's Qwen3RMSNorm. Forward only.

  compile-torch-rmsnorm    torch_own's RMSNorm, compiled    rms_norm@qwen3
  compile-hf-qwen3         transformers' Qwen3RMSNorm       rms_norm@qwen3
  compile-torch-layernorm  torch_own's LayerNorm, compiled  layer_norm@torch

Each is compiled with torch.compile(module, dynamic=False, fullgraph=True) once per (op, contract,
x's shape, dtype): dynamic=False bakes every size into the generated C++ (what a user compiling a
fixed-shape model gets), so every shape is a compilation of its own, and these run one case per call
(no batch_rows: concatenated rows would be shapes of their own). The module's parameters stay graph
inputs (torch's default, inline_inbuilt_nn_modules), so the case's weight is copied into the module
before each call as the eager adapters do, and one compiled graph serves every weight of its shape.
Dynamo's per-function recompile limit (8) would otherwise send the 9th shape back to eager silently
(or, with fullgraph, raise): it is raised for this process, which is why these run in a worker of
their own ("torch-compile"), where that global setting and inductor's compile threads touch nothing
else.

Inductor generates C++ for the CPU and builds it with the compiler named by $CXX (default g++);
the catalog makes these `unavailable` when there is none. Compiling is slow: measured on two cores,
~8 s for the process's first graph and ~2 s for each further shape, cold (a shape's first call: the
results' `seconds` column). Inductor's own on-disk cache (compiled kernels and FX graphs, keyed by the graph,
the shapes, the config and torch's version) makes a repeated shape ~0.2 s. Its default place is under
the temporary directory, which is the run's own in a worker (removed at the end), so it is pointed at
$NORMDIFF_INDUCTOR_CACHE (empty: left where inductor puts it) or ~/.cache/normdiff/inductor, as
jax_own does for JAX; a TORCHINDUCTOR_CACHE_DIR already set wins. A cache hit loads the same
generated code a cold compile builds, so it changes the time, never the numbers.

What inductor computes (measured; tests/implementations/test_runtime_compile.py checks it):
  * Inductor does not emulate intermediate casts (torch._inductor.config.emulate_precision_casts is
    False by default): inside a fused kernel, x * rsqrt(...) stays in float32 across the Llama cast's
    `.to(bfloat16)`, so the Qwen3 RMSNorm's two roundings become one: bf16 outputs are those of the
    one-rounding formula bit for bit, fp16 all but a few reduction-order ulps, and ~25% of elements
    are not the eager module's. The budget holds either rounding, so the rows agree (or are
    identical where the two roundings coincide); with emulate_precision_casts=True the compiled
    modules give eager's bits in bf16 (fp16: all but ~1 element in 40000).
  * float32: inductor's vectorised reduction sums the squares in another order than eager's (a
    quarter to a third of the elements differ from eager in their last bits), well inside the budget
    (worst 7.1 ulp against a budget of ~200 on the default suite's rms_norm@qwen3 cases).
"""
from __future__ import annotations

import os

import torch

from normdiff.cases.model import CaseInputs
from normdiff.harness.data.contracts import Contract
from normdiff.files import INDUCTOR_CACHE_ENV as CACHE_ENV
from normdiff.files import cache_dir
from normdiff.implementations import torch_own
from normdiff.implementations.catalog import compiler_missing
from normdiff.implementations.frameworks.torch import from_numpy as to_torch

RECOMPILE_LIMIT = 100_000


def enable_compile_cache() -> str | None:
    """Point inductor's on-disk cache at a directory that outlives the run; returns it, or None when
    left as it is ($TORCHINDUCTOR_CACHE_DIR set, $NORMDIFF_INDUCTOR_CACHE empty, or the directory not
    writable: compiling again is slower, never wrong)."""
    if os.environ.get("TORCHINDUCTOR_CACHE_DIR") not in (None, "", _torch_default_cache()):
        return None  # set by the user (importing torch._dynamo sets it to its default itself)
    path = cache_dir(CACHE_ENV, "inductor")
    if path is None:
        return None
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = path
    # inductor keeps its precompiled C++ headers (~5-10 s to build, once per directory) under the
    # temporary directory whatever the cache dir says: moved next to the rest (they are keyed by
    # the compiler, its flags and the headers' preprocessed text, so any torch finds its own)
    from torch._inductor import codecache

    if hasattr(codecache, "_HEADER_DIR") and hasattr(codecache, "_HEADER_LOCK_DIR"):
        codecache._HEADER_DIR = os.path.join(path, "precompiled_headers")
        codecache._HEADER_LOCK_DIR = os.path.join(codecache._HEADER_DIR, "locks")
    return path


def _torch_default_cache() -> str | None:
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    except ImportError:
        return None
    return os.path.abspath(default_cache_dir())


def _configure() -> None:
    torch._dynamo.config.recompile_limit = RECOMPILE_LIMIT
    torch._dynamo.config.accumulated_recompile_limit = RECOMPILE_LIMIT
    enable_compile_cache()


_configure()

# (implementation, op, contract, shape, dtype) -> the compiled module (compiled on its first call,
# whose time the results' `seconds` column shows)
_COMPILED: dict[tuple, object] = {}


def _compiled_call(key: tuple, module: torch.nn.Module, *args: torch.Tensor) -> torch.Tensor:
    reason = compiler_missing()
    if reason:
        raise RuntimeError(reason)
    if key not in _COMPILED:
        _COMPILED[key] = torch.compile(module, dynamic=False, fullgraph=True, backend="inductor")
    with torch.inference_mode():
        return _COMPILED[key](*args)


def _own(name: str, op: str, contract: Contract, inputs: CaseInputs) -> torch.Tensor:
    module, arrays = torch_own.prepare(op, contract, inputs)
    x = arrays["x"]
    key = (name, op, contract, tuple(x.shape), x.dtype)
    return _compiled_call(key, _Forward(op, module), x)


class _Forward(torch.nn.Module):
    """torch_own.forward(op, module, {"x": x}) as a module of x (what is compiled)."""

    def __init__(self, op: str, module: torch.nn.Module):
        super().__init__()
        self.op, self.module = op, module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch_own.forward(self.op, self.module, {"x": x})


def own_rms_norm(op: str, contract: Contract, inputs: CaseInputs) -> torch.Tensor:
    return _own("compile-torch-rmsnorm", op, contract, inputs)  # declared for rms_norm only (catalog.py)


def own_layer_norm(op: str, contract: Contract, inputs: CaseInputs) -> torch.Tensor:
    return _own("compile-torch-layernorm", op, contract, inputs)  # declared for layer_norm only


_HF: dict[tuple, torch.nn.Module] = {}


def hf_qwen3(op: str, contract: Contract, inputs: CaseInputs) -> torch.Tensor:
    """transformers' Qwen3RMSNorm(width, eps), weight in the case dtype holding the case's bits."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

    if contract.weight_offset:  # declared for rms_norm@qwen3 only (catalog.py)
        raise ValueError(f"Qwen3RMSNorm is plain gamma, not offset {contract.weight_offset}")
    x, weight = to_torch(inputs.arrays["x"]), to_torch(inputs.arrays["weight"])
    if tuple(weight.shape) != (x.shape[-1],):
        raise ValueError(f"Qwen3RMSNorm({x.shape[-1]}) takes a ({x.shape[-1]},) weight; got {tuple(weight.shape)}")
    module_key = (x.shape[-1], contract.eps, x.dtype)
    if module_key not in _HF:
        _HF[module_key] = Qwen3RMSNorm(x.shape[-1], eps=contract.eps).to(x.dtype).eval()
    norm = _HF[module_key]
    with torch.no_grad():
        norm.weight.copy_(weight)
    return _compiled_call(("compile-hf-qwen3", op, contract, tuple(x.shape), x.dtype), norm, x)
