"""MLX's own normalization functions and modules (CPU, `mlx[cpu]`), called as a user calls them on
the case's tensors.

  mx.fast.rms_norm(x, w, eps)      the statistics in float32 (a float32 sum of squares), then
  mlx.nn.RMSNorm(dims, eps)        x * rsqrt(mean + eps) ROUNDED TO THE INPUT DTYPE, then times w in
                                   the input dtype: the Llama cast, `w * (x * rsqrt).to(dtype)`.
                                   nn.RMSNorm is only `mx.fast.rms_norm(x, self.weight, self.eps)`.
  mx.fast.layer_norm(x, w, b, eps) the mean and the (two-pass, biased) variance in float32, then
  mlx.nn.LayerNorm(dims, eps)      (x - mean) * rsqrt(var + eps) ROUNDED TO THE INPUT DTYPE, times
                                   w in it (rounded again), plus b in it (rounded a third time).

Measured on MLX 0.32.4 (CPU, Linux x86-64) against NumPy models of both orders, bf16 and fp16 rows
of widths 128-4096: fast.rms_norm is bit-identical to the Llama cast on 99.9-100 % of elements
(the rest: the order of the float32 sum) and to one rounding on only 73-75 %; fast.layer_norm to
three roundings on 99.96-99.99 %, to one on 64 %. (MLX's newer CPU kernel, `backend/cpu/norms.cpp`
upstream, multiplies by w and adds b in float32 and rounds once; with it fast.rms_norm still
agrees with the Llama-cast contracts within their 2-ulp chain, but no longer bit for bit.)

Which conventions they are declared for, and why:
  * rms_norm@qwen3, rms_norm@llama, rms_norm@deepseek-v3 and qk_norm@qwen3 (per head, a (head_dim,)
    weight shared by the heads: the rows reshaped to (rows, heads, head_dim), as mlx-lm's Qwen3
    attention calls q_norm): plain gamma, the Llama cast, eps inside the square root - what MLX
    computes. NOT olmo2 / torch (one rounding; the budget would accept it, but the bits are a
    different order), nor the 1 + w conventions (MLX multiplies by w; mlx-lm ports add the 1
    themselves), nor qk_norm@olmo2 (one rounding).
  * layer_norm@torch: F.layer_norm's maths (biased two-pass variance, eps inside, w then + b). No
    convention rounds a LayerNorm three times; the contract is the maths, and the harness judges
    MLX's extra roundings against layer_norm's one-rounding budget as they are: where w * xhat and
    b nearly cancel, a bf16 result misses it by a little (2.06-2.24 ulp against 2.02 on 1024-wide
    rows of the default suite), a known finding. float32 (one rounding there) and the backward agree.

Weights: the case's, in the case dtype (as a model loaded in that dtype holds them; mlx.nn's
modules are created with float32 ones and moved to the dtype, the `set_dtype` a loaded model gets).
With float32 weights MLX would promote a bf16 / fp16 result to float32. eps: always the
contract's (nn.RMSNorm and nn.LayerNorm default to 1e-5, which is llama's but not qwen3's).

Backward (`*_backward`): mx.vjp through the same calls, with respect to x and the weight (and the
bias): MLX's own VJP (on the CPU its fallback graph: the statistics in float32, the gradients
rounded to the input dtype). dw of a (head_dim,) weight shared across heads is summed by MLX over
the broadcast; the gradients come back in the dtype MLX gives them (the case dtype).

Only ever imported inside the MLX worker.
"""
from __future__ import annotations

import numpy as np

import mlx.core as mx
import mlx.nn

from normdiff.cases.model import CaseInputs
from normdiff.harness.data.contracts import Contract
from normdiff.implementations.frameworks.mlx import from_numpy, to_numpy

mx.set_default_device(mx.cpu)


def _operand(inputs: CaseInputs, name: str) -> np.ndarray:
    if name not in inputs.arrays:
        raise ValueError(f"this built-in takes a {name}; the op gives only {', '.join(inputs.arrays)}")
    return np.asarray(inputs.arrays[name])


def _spans(op: str, contract: Contract, inputs: CaseInputs) -> tuple[np.ndarray, tuple]:
    """x as MLX sees it: (rows, heads, head_dim) for a per-head norm, (rows, width) otherwise; and
    x's own shape to return to."""
    x = _operand(inputs, "x")
    heads = inputs.num_heads if contract.scope == "head" else 1  # one span per row for the row ops
    return (x.reshape(x.shape[0], heads, -1) if heads > 1 else x), x.shape


def _tiled(v: np.ndarray, width: int) -> np.ndarray:
    # a shorter per-case operand across the row (numpy_own's rule); never needed for the declared pairs
    return v if v.shape[-1] == width else np.tile(v, width // v.shape[-1])


def _rms_operands(op, contract, inputs):
    x, shape = _spans(op, contract, inputs)
    return from_numpy(x), from_numpy(_tiled(_operand(inputs, "weight"), x.shape[-1])), shape


def _ln_operands(op, contract, inputs):
    x, shape = _spans(op, contract, inputs)
    width = x.shape[-1]
    return (from_numpy(x), from_numpy(_tiled(_operand(inputs, "weight"), width)),
            from_numpy(_tiled(_operand(inputs, "bias"), width)), shape)


def _result(y, shape) -> np.ndarray:
    mx.eval(y)
    return to_numpy(y).reshape(shape)


# ---- mx.fast ---------------------------------------------------------------------------------------

def fast_rms_norm(op: str, contract: Contract, inputs: CaseInputs) -> np.ndarray:
    x, w, shape = _rms_operands(op, contract, inputs)
    return _result(mx.fast.rms_norm(x, w, contract.eps), shape)


def fast_layer_norm(op: str, contract: Contract, inputs: CaseInputs) -> np.ndarray:
    x, w, b, shape = _ln_operands(op, contract, inputs)
    return _result(mx.fast.layer_norm(x, w, b, contract.eps), shape)


# ---- mlx.nn ----------------------------------------------------------------------------------------
_MODULES: dict[tuple, mlx.nn.Module] = {}


def _module(kind, width: int, eps: float, dtype) -> mlx.nn.Module:
    key = (kind, width, eps, dtype)
    if key not in _MODULES:
        module = kind(width, eps=eps)
        module.set_dtype(dtype)  # as a model loaded in the case dtype holds it
        _MODULES[key] = module
    return _MODULES[key]


def nn_rms_norm(op: str, contract: Contract, inputs: CaseInputs) -> np.ndarray:
    x, w, shape = _rms_operands(op, contract, inputs)
    norm = _module(mlx.nn.RMSNorm, x.shape[-1], contract.eps, x.dtype)
    norm.weight = w
    return _result(norm(x), shape)


def nn_layer_norm(op: str, contract: Contract, inputs: CaseInputs) -> np.ndarray:
    x, w, b, shape = _ln_operands(op, contract, inputs)
    norm = _module(mlx.nn.LayerNorm, x.shape[-1], contract.eps, x.dtype)
    norm.weight, norm.bias = w, b
    return _result(norm(x), shape)


# ---- backward: mx.vjp -------------------------------------------------------------------------------

def _vjp(function, primals: list, names: list[str], dy: np.ndarray, shape) -> dict:
    dy = np.asarray(dy)
    if dy.shape != tuple(shape):
        raise ValueError(f"dy has shape {dy.shape}, x has {tuple(shape)}")
    cotangent = from_numpy(dy.reshape(primals[0].shape))
    _, grads = mx.vjp(function, primals, [cotangent])
    mx.eval(grads)
    out = {name: to_numpy(g) for name, g in zip(names, grads)}
    out["x"] = out["x"].reshape(shape)
    return out


def fast_rms_norm_backward(op: str, contract: Contract, inputs: CaseInputs, dy) -> dict:
    x, w, shape = _rms_operands(op, contract, inputs)
    return _vjp(lambda x, w: mx.fast.rms_norm(x, w, contract.eps), [x, w], ["x", "weight"], dy, shape)


def fast_layer_norm_backward(op: str, contract: Contract, inputs: CaseInputs, dy) -> dict:
    x, w, b, shape = _ln_operands(op, contract, inputs)
    return _vjp(lambda x, w, b: mx.fast.layer_norm(x, w, b, contract.eps), [x, w, b],
                ["x", "weight", "bias"], dy, shape)


def nn_rms_norm_backward(op: str, contract: Contract, inputs: CaseInputs, dy) -> dict:
    x, w, shape = _rms_operands(op, contract, inputs)
    norm = _module(mlx.nn.RMSNorm, x.shape[-1], contract.eps, x.dtype)

    def call(x, w):
        norm.weight = w
        return norm(x)

    return _vjp(call, [x, w], ["x", "weight"], dy, shape)


def nn_layer_norm_backward(op: str, contract: Contract, inputs: CaseInputs, dy) -> dict:
    x, w, b, shape = _ln_operands(op, contract, inputs)
    norm = _module(mlx.nn.LayerNorm, x.shape[-1], contract.eps, x.dtype)

    def call(x, w, b):
        norm.weight, norm.bias = w, b
        return norm(x)

    return _vjp(call, [x, w, b], ["x", "weight", "bias"], dy, shape)


# ---- mx.quantize: MLX's own MX quantizers after its own RMSNorm -------------------------------
#
# mx.quantize(y, 32, bits, mode="mxfp8" | "mxfp4") on MLX's float32 norm output (mx.fast.rms_norm of
# the case's values in float32: the mx conventions keep y in float32), as an MLX user quantizes a
# norm's output for the next layer. Measured on MLX 0.32.4 (CPU; CATALOGUE.md, "Quantizing norms"):
# the E8M0 exponent is ceil(log2(amax / max)) for both modes (0 mismatches in 15216 groups), so it is
# declared for the mxfp8 and mxfp4 conventions; mxfp8 rounds to nearest even; mxfp4 rounds ties
# toward zero (0.75 -> 0.5, 2.5 -> 2) where the contract rounds them to even, which shows wherever a
# quotient lands exactly on a tie. mx.quantize packs q into uint32 words: q is read back through
# mx.dequantize in float32 (exactly code * 2^e) divided by the power of two, and the scales are
# returned as MLX gives them, E8M0 bytes.

_MX_MODES = {"float8_e4m3fn": ("mxfp8", 8), "float4_e2m1fn": ("mxfp4", 4)}
NVFP4_GLOBAL = 448.0 * 6.0  # MLX's global_scale is the tensor's amax: it encodes with 2688 / global_scale


def quantize_mx(op: str, contract: Contract, inputs: CaseInputs):
    """q and scale bytes of mx.quantize on mx.fast.rms_norm's float32 output: MX blocks of 32 with
    E8M0 scales, or NVFP4 (rms_norm_quant_static@nvfp4: blocks of 16, E4M3 scales) with the case's
    global encode scale g passed as MLX takes it, global_scale = 2688 / g. q is read back from
    mx.dequantize without the global scale, which is exactly the code times the E4M3 (or power of
    two) scale, divided by that scale (0 where MLX wrote a zero scale)."""
    import ml_dtypes

    x, w = _operand(inputs, "x"), _operand(inputs, "weight")
    nvfp4 = contract.scale_rounding == "e4m3"
    mode, bits, group = ("nvfp4", 4, 16) if nvfp4 else (*_MX_MODES[contract.quant_dtype], 32)
    y = mx.fast.rms_norm(from_numpy(x.astype(np.float32)), from_numpy(w.astype(np.float32)), contract.eps)
    extra = {}
    if nvfp4:
        g = np.float32(inputs.arrays["tensor_scale"].reshape(-1)[0])
        extra["global_scale"] = mx.array(np.float32(NVFP4_GLOBAL) / g)
    packed, scales = mx.quantize(y, group_size=group, bits=bits, mode=mode, **extra)
    values = to_numpy(mx.dequantize(packed, scales, group_size=group, bits=bits, mode=mode, dtype=mx.float32))
    byte = to_numpy(scales)
    scale = byte.view(ml_dtypes.float8_e4m3fn).astype(np.float64) if nvfp4 else np.ldexp(1.0, byte.astype(np.int64) - 127)
    blocks = values.reshape(*values.shape[:-1], -1, group)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(scale[..., None] != 0, blocks / np.where(scale != 0, scale, 1.0)[..., None], 0.0)
    return q.reshape(values.shape).astype(np.float32).astype(getattr(ml_dtypes, contract.quant_dtype)), byte
