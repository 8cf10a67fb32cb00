"""flax's `nnx.RMSNorm` (and `nnx.LayerNorm`, its own section below), the JAX-side framework
built-ins, as a user would construct and call them.

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

Backward (`rms_norm_backward`, `rms_norm_in_dtype_backward`): jax.vjp through the very module call
(the module split into its graph and its state, merged back inside the differentiated function),
with respect to x and the `scale` param; the scale's gradient is the weight's. Each comes back in
the dtype flax's differentiation gives it: dx in x's dtype (the case dtype), dscale in the param's
dtype - float32 with flax's defaults, the case dtype for the in-dtype configuration. A (head_dim,)
weight tiled across the row in the forward gets the tiled scale's gradient folded back: summed over
the copies in float32, then cast to the gradient's dtype. With dtype = param_dtype = bf16 / fp16,
flax lifts x to float32 twice (for the statistics, and where it meets the float32 rsqrt), so its vjp
rounds the two parts of dx (the direct term and the projection term) to the dtype separately and
adds them in the dtype: three roundings where the defaults (x lifted once) have one.

Modules are cached per (width, eps, dtype); each call is a jitted function of the module's state
and x, the module's graph closed over (as nnx.jit splits and merges it), run through
jax_programs.py so that a repeat run loads the compiled program instead of tracing it again; rows
are padded to a power of two (as in jax_own) so that batches of different sizes share programs.
Only ever imported inside the JAX worker.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from normdiff.cases.model import CaseInputs
from normdiff.harness.data.contracts import Contract
from normdiff.implementations import jax_programs
from normdiff.implementations.frameworks.jax import set_weight
from normdiff.implementations.jax_own import CACHE_DIR, pad_nonzero, padded_rows

PROGRAMS = jax_programs.Programs(CACHE_DIR, jax_programs.salt((__file__,), ("flax",)))
_JITTED: dict[tuple, object] = {}
_MODULES: dict[tuple, nnx.Module] = {}  # by the keys _module and _layer_norm make


def _through(key: tuple, module, fn, *args):
    """fn(graphdef, state, *args), jitted with the module's graph closed over (one jitted function
    per `key`, which names the module and fn), through its compiled program."""
    graphdef, state = nnx.split(module)
    jitted = _JITTED.get(key)
    if jitted is None:
        jitted = _JITTED[key] = jax.jit(functools.partial(fn, graphdef))
    return PROGRAMS.call(key, jitted, state, *args)


def _built(make) -> nnx.Module:
    """The module `make` builds, its parameters abstract until the case's values go in (set_weight):
    the same module, without initialising parameters only to overwrite them (each initialiser a
    JAX op run eagerly, compiled for every new shape and dtype)."""
    return nnx.eval_shape(make)


def _apply(graphdef, state, x):
    return nnx.merge(graphdef, state)(x)


def _module(width: int, eps: float, dtype, in_dtype: bool) -> tuple[nnx.RMSNorm, tuple]:
    """The cached nnx.RMSNorm for (width, eps, dtype, in_dtype), and its key."""
    key = ("RMSNorm", width, eps, str(np.dtype(dtype)), in_dtype)
    if key not in _MODULES:
        dtypes = dict(dtype=dtype, param_dtype=dtype) if in_dtype else {}  # else flax's defaults
        _MODULES[key] = _built(lambda: nnx.RMSNorm(width, epsilon=eps, rngs=nnx.Rngs(0), **dtypes))
    return _MODULES[key], key


def _run(op: str, contract: Contract, inputs: CaseInputs, in_dtype: bool) -> np.ndarray:
    x, weight = np.asarray(inputs.arrays["x"]), np.asarray(inputs.arrays["weight"])
    if weight.shape[-1] != x.shape[-1]:  # a (head_dim,) weight on a full-vector norm: tiled
        weight = np.tile(weight, x.shape[-1] // weight.shape[-1])
    norm, key = _module(x.shape[-1], contract.eps, x.dtype, in_dtype)
    set_weight(norm, "scale", weight)
    rows = x.shape[0]
    # zero padding rows are harmless (rows are independent, eps keeps them finite), sliced off
    padded = np.pad(x, ((0, padded_rows(rows) - rows), (0, 0)))
    return np.array(_through(key + ("forward",), norm, _apply, padded))[:rows]


rms_norm = functools.partial(_run, in_dtype=False)
rms_norm_in_dtype = functools.partial(_run, in_dtype=True)


def _vjp(graphdef, state, x, dy):
    """dx, and the gradient of each param by name (a module's: nnx.RMSNorm's scale, nnx.LayerNorm's
    scale and bias)."""
    def call(state, x):
        return nnx.merge(graphdef, state)(x)

    y, pull = jax.vjp(call, state, x)
    # The cotangent must have the output's dtype: flax's defaults return float32 for a bf16 / fp16
    # input, so dy (in the case dtype) is cast to float32 here, before the vjp. That cast widens
    # and is exact; a narrowing one (which would round dy) is refused.
    if jnp.promote_types(dy.dtype, y.dtype) != y.dtype:
        raise TypeError(f"dy is {dy.dtype} and the output {y.dtype}: casting would round dy")
    dstate, dx = pull(dy.astype(y.dtype))
    return dx, nnx.to_pure_dict(dstate)


def _backward(op: str, contract: Contract, inputs: CaseInputs, dy: np.ndarray, in_dtype: bool) -> dict:
    x, case_weight = np.asarray(inputs.arrays["x"]), np.asarray(inputs.arrays["weight"])
    dy = np.asarray(dy)
    if dy.shape != x.shape:
        raise ValueError(f"dy has shape {dy.shape}, x has {x.shape}")
    weight = case_weight
    if weight.shape[-1] != x.shape[-1]:  # tiled, as in the forward
        weight = np.tile(weight, x.shape[-1] // weight.shape[-1])
    norm, key = _module(x.shape[-1], contract.eps, x.dtype, in_dtype)
    set_weight(norm, "scale", weight)
    rows = x.shape[0]
    # Padded as jax_own.backward pads (its comment says why that leaves dscale exact): x with
    # alternating +-1 rows (finite forward values under any eps), dy with zero rows, so a padded row
    # adds an exact 0 to dscale; its dx is sliced off.
    padded = padded_rows(rows)
    dx, grads = _through(key + ("backward",), norm, _vjp, pad_nonzero(x, padded), np.pad(dy, ((0, padded - rows), (0, 0))))
    dscale = np.asarray(grads["scale"])
    if case_weight.shape[-1] != dscale.shape[-1]:  # fold the tiled copies back onto the weight
        folded = dscale.astype(np.float32).reshape(-1, case_weight.shape[-1]).sum(axis=0)
        dscale = folded.astype(dscale.dtype)
    return {"x": np.array(np.asarray(dx)[:rows]), "weight": np.array(dscale)}


rms_norm_backward = functools.partial(_backward, in_dtype=False)
rms_norm_in_dtype_backward = functools.partial(_backward, in_dtype=True)


# ---- nnx.LayerNorm --------------------------------------------------------------------------------
# Declared for layer_norm@torch: flax computes y = (x - mean) * (rsqrt(var + eps) * scale) + bias
# with the biased variance, eps inside the square root, the statistics in float32 (at least) and
# scale and bias float32 params by default: F.layer_norm's maths, the weight multiplied in float32
# and the result rounded once (to float32 with the defaults: the same `output-dtype-promoted`
# behaviour as nnx.RMSNorm above, returned as flax returns it). Two defaults matter:
#   * epsilon defaults to 1e-6, torch's to 1e-5: the contract's eps is passed explicitly;
#   * use_fast_variance=True: the variance is E[x^2] - E[x]^2 in float32 (clamped at 0), the
#     contract's `variance_form="one_pass"`. That is the same maths (the oracle ignores the knob), so
#     the declaration is honest, but it is the rounding the `ln-one-pass-variance` bug catalogues:
#     rows whose |mean| >> std (the `narrow` regime) cancel catastrophically, and the harness reports
#     it, as a user constructing nnx.LayerNorm(width) would get it. It is not switched off here.

def _layer_norm(inputs: CaseInputs, contract: Contract) -> tuple[nnx.LayerNorm, np.ndarray, tuple]:
    """The cached nnx.LayerNorm (flax's defaults but eps) holding the case's weight and bias, tiled
    to the width where shorter; x; and the module's key."""
    x = np.asarray(inputs.arrays["x"])
    width = x.shape[-1]
    key = ("LayerNorm", width, contract.eps)
    if key not in _MODULES:
        _MODULES[key] = _built(lambda: nnx.LayerNorm(width, epsilon=contract.eps, rngs=nnx.Rngs(0)))
    norm = _MODULES[key]
    for name, param in (("weight", "scale"), ("bias", "bias")):
        value = np.asarray(inputs.arrays[name])
        if value.shape[-1] != width:
            value = np.tile(value, width // value.shape[-1])
        set_weight(norm, param, value)
    return norm, x, key


def layer_norm(op: str, contract: Contract, inputs: CaseInputs) -> np.ndarray:
    norm, x, key = _layer_norm(inputs, contract)
    rows = x.shape[0]
    padded = np.pad(x, ((0, padded_rows(rows) - rows), (0, 0)))  # zero rows: finite (eps), sliced off
    return np.array(_through(key + ("forward",), norm, _apply, padded))[:rows]


def layer_norm_backward(op: str, contract: Contract, inputs: CaseInputs, dy: np.ndarray) -> dict:
    """jax.vjp through nnx.LayerNorm: {"x", "weight", "bias"}; dx in x's dtype, dscale and dbias in
    the params' (float32 with flax's defaults), folded back over the tiles of a shorter operand."""
    norm, x, key = _layer_norm(inputs, contract)
    dy = np.asarray(dy)
    if dy.shape != x.shape:
        raise ValueError(f"dy has shape {dy.shape}, x has {x.shape}")
    rows = x.shape[0]
    padded = padded_rows(rows)  # padded as in _backward (jax_own.backward says why dscale stays exact)
    dx, grads = _through(key + ("backward",), norm, _vjp, pad_nonzero(x, padded),
                         np.pad(dy, ((0, padded - rows), (0, 0))))
    out = {"x": np.array(np.asarray(dx)[:rows])}
    for name, grad in (("weight", grads["scale"]), ("bias", grads["bias"])):
        grad, length = np.asarray(grad), np.asarray(inputs.arrays[name]).shape[-1]
        if grad.shape[-1] != length:  # fold the tiled copies back onto the case's operand
            grad = grad.astype(np.float32).reshape(-1, length).sum(axis=0).astype(grad.dtype)
        out[name] = np.array(grad)
    return out
