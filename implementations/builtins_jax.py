"""flax's `nnx.RMSNorm`, the JAX-side framework built-in, as a user would construct and call it.

flax computes the statistics in float32 and returns `x * (rsqrt(mean(x^2) + eps) * scale)` in the
dtype its arguments promote to: plain gamma, one rounding (olmo2's contract, also torch's; and
qk_norm@olmo2 as an RMSNorm over the full H*D vector). It is not declared for llama / qwen3 (they
round before the weight multiply) nor for the 1 + w conventions, for the reasons builtins.py gives.

Output dtype, decided honestly: by default (`param_dtype=float32`, `dtype=None`) flax promotes a
bfloat16 or float16 input to float32 and RETURNS FLOAT32 - the catalogue's `output-dtype-promoted`
behaviour. `flax-rmsnorm` runs exactly that default and returns what flax returns; the harness
measures its error in ULPs of the case dtype (so it agrees: it is more accurate than a rounded
result) and records `output_dtype` float32 with the detail "returns float32 for bfloat16 input", so
the promotion shows in every report instead of being hidden by a cast here. `flax-rmsnorm-dtype` is
the configuration a bf16 model uses (`dtype = param_dtype = the input dtype`): float32 statistics,
output rounded once to the input dtype, judged like any other implementation.

Modules are cached per (width, eps, dtype); the call is `nnx.jit`-compiled and rows are padded to a
power of two (as in jax_own) so that batches of different sizes share compiled programs. Only ever
imported inside the JAX worker.
"""
from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np
from flax import nnx

from normdiff.cases.model import CaseInputs
from normdiff.harness.data.contracts import Contract
from normdiff.implementations.jax_own import padded_rows

_MODULES: dict[tuple, nnx.RMSNorm] = {}


@nnx.jit
def _apply(norm: nnx.RMSNorm, x):
    return norm(x)


def _module(width: int, eps: float, dtype, in_dtype: bool) -> nnx.RMSNorm:
    key = (width, eps, np.dtype(dtype), in_dtype)
    if key not in _MODULES:
        dtypes = dict(dtype=dtype, param_dtype=dtype) if in_dtype else {}  # else flax's defaults
        _MODULES[key] = nnx.RMSNorm(width, epsilon=eps, rngs=nnx.Rngs(0), **dtypes)
    return _MODULES[key]


def _run(op: str, contract: Contract, inputs: CaseInputs, in_dtype: bool) -> np.ndarray:
    x, weight = np.asarray(inputs.arrays["x"]), np.asarray(inputs.arrays["weight"])
    if weight.shape[-1] != x.shape[-1]:  # a (head_dim,) weight on a full-vector norm: tiled
        weight = np.tile(weight, x.shape[-1] // weight.shape[-1])
    norm = _module(x.shape[-1], contract.eps, x.dtype, in_dtype)
    norm.scale[...] = jnp.asarray(weight, norm.scale.dtype)  # exact: bf16/fp16 fit in float32
    rows = x.shape[0]
    # zero padding rows are harmless (rows are independent, eps keeps them finite), sliced off
    padded = np.pad(x, ((0, padded_rows(rows) - rows), (0, 0)))
    return np.array(_apply(norm, padded))[:rows]


rms_norm = functools.partial(_run, in_dtype=False)
rms_norm_in_dtype = functools.partial(_run, in_dtype=True)
