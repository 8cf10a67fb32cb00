"""Own NumPy implementation: inputs and outputs in the case dtype (bfloat16 through ml_dtypes),
statistics in float32, and the convention's cast points, exactly as the PyTorch modules do them.

It honours every knob of the contract, so the same code also computes the mutants' formulas.

qk_norm_rope: the qk_norm path, then RoPE as HF's apply_rotary_pos_emb does it: float32 angles
(the contract's: float32 inverse frequencies with the power correctly rounded, times the float32
position), cos and sin of them correctly rounded to float32 (taken in float64) and then cast to the
input dtype, and q * cos + rotate_half(q) * sin in the input dtype (each product and the sum
rounded to it; ml_dtypes and NumPy float16 compute in float32 and round, which for these two-operand
ops is the correctly rounded result).

Why it imports nothing from normdiff at run time (only types, and the one RoPE frequency function):
`normdiff repro --script` inlines this file's source into a standalone script that must run with
NumPy and ml_dtypes alone; the inliner also inlines harness/data/rope.py, the only normdiff module
this one uses. It reads the contract's knobs and the arrays it is given, never the op records, so
the same code runs inside that script and inside a worker that knows no op it was not told about.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from normdiff.harness.data.rope import inverse_frequencies

if TYPE_CHECKING:
    from normdiff.cases.model import CaseInputs
    from normdiff.harness.data.contracts import Contract

_F32 = np.float32


def _cast(v: np.ndarray, dtype, final: bool = False) -> np.ndarray:
    """A rounding point of the contract: v in `dtype` (`final`: the one that ends the chain). The
    chain reference (harness/engine/chain.py) runs this code in float64 with its own rounding here."""
    return v.astype(dtype)


def _act(z: np.ndarray, kind: str, f=_F32) -> np.ndarray:
    sig = (1.0 / (1.0 + np.exp(-z))).astype(f)
    return z * sig if kind == "silu" else sig


def _inverse_scale(xs: np.ndarray, c: Contract, dtype, f=_F32) -> np.ndarray:
    """1 / (the denominator), in the compute dtype `f` (float32), one value per normalised span; the
    denominator itself for the inverted contract."""
    inverse = _reciprocal_denominator(xs, c, dtype, f)
    return 1.0 / inverse if c.inverted else inverse


def _eps(xs: np.ndarray, c: Contract, f=_F32) -> np.ndarray:
    """eps in the compute dtype, scaled as the contract says (eps_scale: the span's width, or its max x^2)."""
    eps = f(c.eps)
    if c.eps_scale == "span":
        return eps * f(xs.shape[-1])
    if c.eps_scale == "max_square":
        peak = np.abs(xs.astype(f)).max(-1, keepdims=True)
        return eps * peak * peak
    return eps


def _mean(xs: np.ndarray, f=_F32) -> np.ndarray:
    """The span's mean: summed in the compute dtype (float32), rounded to xs' dtype, divided by n in it."""
    return xs.astype(f).sum(-1, keepdims=True).astype(xs.dtype) / xs.dtype.type(xs.shape[-1])


def _reciprocal_denominator(xs: np.ndarray, c: Contract, dtype, f=_F32) -> np.ndarray:
    eps = _eps(xs, c, f)
    xs = xs.astype(dtype if c.stats_dtype == "input" else f)
    one_pass = c.statistic == "variance" and c.variance_form == "one_pass"
    if c.statistic == "variance" and not one_pass:
        xs = xs - _mean(xs, f)
    # squares in the statistics dtype, accumulated in float32 and rounded once, as torch and XLA
    # reduce bf16/fp16 on CPU (ml_dtypes' own bf16 sum would accumulate in bf16 and stall)
    squares = xs * xs
    stat = squares.astype(f).sum(-1, keepdims=True).astype(squares.dtype)
    if c.statistic != "sum_square":
        divisor = xs.shape[-1] - (c.correction if c.statistic == "variance" else 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            stat = stat / xs.dtype.type(divisor)
    if one_pass:  # E[x^2] - E[x]^2: the same maths, cancelling catastrophically when |mean| >> std
        mean = _mean(xs, f)
        stat = stat - mean * mean * xs.dtype.type(xs.shape[-1]) / xs.dtype.type(xs.shape[-1] - c.correction)
    stat = stat.astype(f)
    with np.errstate(divide="ignore"):  # a zero span with no eps (or eps * max|x|^2 = 0): 1/0
        if c.eps_placement == "inside":
            return 1.0 / np.sqrt(stat + eps)
        if c.eps_placement == "outside":
            return 1.0 / (np.sqrt(stat) + eps)
        if c.eps_placement == "clamp":
            return 1.0 / np.maximum(np.sqrt(stat), eps)
        return 1.0 / np.sqrt(stat)


def _scale(weight: np.ndarray, c: Contract, dtype, f=_F32) -> np.ndarray:
    """offset + w, in the compute dtype (float32) or (the mutant) in the input dtype."""
    if c.offset_dtype == "input":
        return (weight + weight.dtype.type(c.weight_offset)).astype(dtype)
    return weight.astype(f) + f(c.weight_offset)


def _tiled(v: np.ndarray, width: int) -> np.ndarray:
    """A per-case operand across the row (a per-head weight is shared by every head)."""
    return v if v.shape[-1] == width else np.tile(v, width // v.shape[-1])


def rope(q: np.ndarray, positions: np.ndarray, num_heads: int, theta: float) -> np.ndarray:
    """RoPE (rotate_half form) on q (..., H * D) in q's dtype; one position per row."""
    dtype = q.dtype
    dim = q.shape[-1] // num_heads
    heads = q.reshape(-1, num_heads, dim)
    pos = np.asarray(positions).reshape(-1)
    if pos.shape[0] != heads.shape[0]:
        raise ValueError(f"{pos.shape[0]} positions for {heads.shape[0]} rows")
    angles = pos.astype(_F32)[:, None] * inverse_frequencies(dim, theta)[None, :]  # float32
    emb = np.concatenate([angles, angles], axis=-1).astype(np.float64)[:, None, :]
    cos = np.cos(emb).astype(_F32).astype(dtype)
    sin = np.sin(emb).astype(_F32).astype(dtype)
    half = dim // 2
    rotated_half = np.concatenate([-heads[..., half:], heads[..., :half]], axis=-1)
    return (heads * cos + rotated_half * sin).astype(dtype).reshape(q.shape)


def run(op: str, c: Contract, inputs: CaseInputs, f=_F32, cast=_cast):
    """The op's output: y, or for a fused add the tuple (y, residual_out). `f` is the dtype every
    step between the contract's rounding points is computed in (float32; the chain reference takes
    float64) and `cast` what such a rounding point does (`_cast`)."""
    a = inputs.arrays
    if "_quant" in op:  # rms_norm_quant, add_rms_norm_quant and their _static forms (names: ops/)
        return quantizing(op, c, inputs, f, cast)
    if "residual" in a:
        return add_norm(c, inputs, f, cast)
    if "positions" in a:  # qk_norm_rope: the norm and the rotation in the contract's order
        turn = lambda v: rope(v, a["positions"], inputs.num_heads, c.rope_theta)  # noqa: E731
        if c.rope_order == "rope_then_norm":
            return _norm(c, inputs, turn(a["x"]), f=f, cast=cast)
        return turn(_norm(c, inputs, a["x"], f=f, cast=cast))
    return _norm(c, inputs, a["x"], f=f, cast=cast)


def add_norm(c: Contract, inputs: CaseInputs, f=_F32, cast=_cast) -> tuple[np.ndarray, np.ndarray]:
    """h = x + residual, y = the norm of h: h rounded to the input dtype before the norm
    (residual_dtype "input", HF's decoder) or kept in float32 (vLLM's native path); residual_out
    is h in the input dtype, rounded to nearest or (the bug) truncated toward zero."""
    x, r = inputs.arrays["x"], inputs.arrays["residual"]
    dtype = x.dtype
    h32 = x.astype(f) + r.astype(f)
    out = _to_dtype(x.astype(np.float64) + r.astype(np.float64), dtype, c.residual_rounding)
    if c.residual_order == "after_norm":  # the bug: the norm of x, the residual added to its output
        y = (_norm(c, inputs, x, f=f, cast=cast).astype(f) + r.astype(f)).astype(dtype)
        return y, out
    normed = h32 if c.residual_dtype == "float32" else out
    return _norm(c, inputs, normed, dtype, f, cast), out


def _to_dtype(v: np.ndarray, dtype, rounding: str = "nearest") -> np.ndarray:
    """float64 v in `dtype`, rounded to nearest, or truncated toward zero (one step back toward
    zero wherever nearest rounded away from it)."""
    near = v.astype(dtype)
    if rounding != "truncate":
        return near
    with np.errstate(invalid="ignore"):
        away = np.abs(near.astype(np.float64)) > np.abs(v)
    if np.dtype(dtype).itemsize == 2:  # bf16 / fp16: one step toward zero is the magnitude's bits - 1
        bits = near.view(np.uint16)
        stepped = np.where(near == 0, bits, bits - np.uint16(1)).astype(np.uint16).view(dtype)
    else:
        stepped = np.nextafter(near, np.zeros_like(near))
    return np.where(away, stepped, near)


def _norm(c: Contract, inputs: CaseInputs, x: np.ndarray, dtype=None, f=_F32, cast=_cast) -> np.ndarray:
    """The norm of x (its rounding points in `dtype`, default x's: a float32 x is normalised into
    the case dtype when a fused add keeps its sum in float32)."""
    a = inputs.arrays
    dtype = dtype or x.dtype
    xf = x.astype(f)
    gate = _act(a["gate"].astype(f), c.gate_activation, f) if "gate" in a else None
    if gate is not None and c.gate_order == "gate_then_norm":
        xf = xf * gate
    heads = inputs.num_heads if c.scope == "head" else 1
    spans = xf.reshape(*xf.shape[:-1], heads, -1)
    inverse = _inverse_scale(spans, c, dtype, f)
    if c.centre:  # LayerNorm: the centred x (the float32 mean) over the denominator
        spans = spans - _mean(spans, f)
    with np.errstate(invalid="ignore"):
        y = (spans * inverse).reshape(xf.shape)
    bias = _tiled(a["bias"], x.shape[-1]).astype(f) if "bias" in a else None
    if bias is not None and "weight" in a and c.bias_order == "before_scale":
        y = y + bias
    if "weight" in a:
        w = _tiled(a["weight"], x.shape[-1])
        if c.cast == "llama":  # round the normalised value first, multiply in the input dtype
            y = (_scale(w, c, dtype, f).astype(dtype) * cast(y, dtype))
        else:
            y = y * _scale(w, c, dtype, f).astype(f)
    if bias is not None and (c.bias_order == "after_scale" or "weight" not in a):
        y = y.astype(f) + bias
    if gate is not None and c.gate_order == "norm_then_gate":
        y = y.astype(f) * gate
    return cast(y, dtype, final=True)


# ---- quantizing norms (ops/quantize.py has the exact maths this follows in float32) ---------------

# each format's emax: the exponent of its largest power of two (OCP MX's emax_elem; the floor of
# log2 of its max, as ops/quantize.py's emax), kept here rather than read from normdiff's tables so that
# a repro script runs this file alone; torch_own and jax_own read it from here
EMAX = {"float8_e4m3fn": 8, "float8_e4m3fnuz": 7, "float8_e5m2": 15, "float4_e2m1fn": 2, "int8": 6}


def quantizing(op: str, c: Contract, inputs: CaseInputs, f=_F32, cast=_cast):
    """(q, scale) of the norm's y, or for the fused add (q, scale, residual_out): y computed as the
    plain op computes it, kept in float32 or rounded to the input dtype first (quant_input), the
    scale from each row's or block's float32 amax, q = y / scale clamped and cast to the format
    (ml_dtypes rounds a float32 to nearest even once)."""
    a = inputs.arrays
    dtype = a["x"].dtype
    keep = f if c.quant_input == "float32" else dtype
    if "residual" in a:
        x, r = a["x"], a["residual"]
        residual_out = _to_dtype(x.astype(np.float64) + r.astype(np.float64), dtype, c.residual_rounding)
        h = x.astype(f) + r.astype(f) if c.residual_dtype == "float32" else residual_out
        y = _norm(c, inputs, h, keep, f, cast)
    else:
        residual_out = None
        y = _norm(c, inputs, a["x"], keep, f, cast)
    source = y
    if c.scale_from == "normalised" and "weight" in a:
        bare = type(inputs)(**{**vars(inputs), "arrays": {k: v for k, v in a.items() if k != "weight"}})
        source = _norm(c, bare, h if residual_out is not None else a["x"], keep, f, cast)
    given = a.get("tensor_scale")  # rms_norm_quant_static's per-tensor scale (float32)
    q, scale = quantize_values(y.astype(f), source.astype(f), c, f, None if given is None else f(given.reshape(-1)[0]))
    return (q, scale) if residual_out is None else (q, scale, residual_out)


def quantize_values(y: np.ndarray, source: np.ndarray, c: Contract, f=_F32, given=None) -> tuple[np.ndarray, np.ndarray]:
    """q and the float32 scales of float32 y per row (quant_group 0) or block of quant_group columns;
    `given` the case's per-tensor scale: the scale itself (static FP8, which multiplies by 1 / scale as
    vLLM's and FlashInfer's kernels do), its inverse, or NVFP4's global scale g."""
    import ml_dtypes

    n = y.shape[-1] if not c.quant_group else c.quant_group
    blocks = y.reshape(*y.shape[:-1], y.shape[-1] // n, n)
    with np.errstate(divide="ignore", invalid="ignore"):
        if given is not None and c.tensor_scale != "global":
            scale = np.full(blocks.shape[:-1], given, dtype=f)
            t = (blocks * (f(1.0) / given if c.tensor_scale == "divisor" else given)).astype(f)
        else:
            scale, t = _block_scales(blocks, source.reshape(blocks.shape), c, f, given)
    fmax = f(c.quant_max)
    integer = c.quant_dtype == "int8"
    if c.saturate or integer:  # (a float-to-int8 cast saturates here, as CUDA's cvt.sat does)
        low = -fmax - f(1.0) if integer and c.quant_max == 127.0 else -fmax
        t = np.clip(t, low, fmax if not integer else min(fmax, f(127.0)))
    if integer:  # (a float format's cast rounds to nearest even itself)
        t = {"truncate": np.trunc, "half_away": lambda v: np.sign(v) * np.floor(np.abs(v) + f(0.5)),
             "nearest": np.rint}[c.quant_rounding](t)
    q = t.astype(np.int8) if integer else t.astype(getattr(ml_dtypes, c.quant_dtype))
    return q.reshape(y.shape), scale


def _block_scales(blocks: np.ndarray, source: np.ndarray, c: Contract, f=_F32, g=None):
    """Each block's float32 scale from its amax, and the quotients y / scale (0 where the scale is 0,
    under the zero guard). NVFP4 (a global scale g): scale = e4m3(g * (amax * (1 / 6))) and y times
    1 / (scale * (1 / g)), as TensorRT-LLM's cvt_warp_fp16_to_fp4 orders it."""
    amax = np.abs(source).max(-1)
    if c.amax_floor:
        amax = (np.maximum if c.amax_bound == "floor" else np.minimum)(amax, f(c.amax_floor))
    raw = amax / f(c.quant_max) if g is None else g * (amax * (f(1.0) / f(c.quant_max)))
    scale = np.maximum(_rounded_scale(raw, amax, c, f), f(c.scale_floor)).astype(f)
    s = scale[..., None] if g is None else (scale * (f(1.0) / g))[..., None]
    if g is not None:  # multiplied by the reciprocal of the decode scale
        return scale, np.where(s != 0, blocks * (f(1.0) / np.where(s != 0, s, f(1.0))), f(0.0)).astype(f)
    if not c.zero_guard:
        return scale, (blocks / s).astype(f)
    return scale, np.where(s != 0, blocks / np.where(s != 0, s, f(1.0)), f(0.0)).astype(f)


def _rounded_scale(raw: np.ndarray, amax: np.ndarray, c: Contract, f=_F32) -> np.ndarray:
    """The scale rounded as the contract says: to E4M3 (saturating at 448: NVFP4's block scale), or
    to a power of two from the float32 bits (frexp is exact; a zero block's power-of-two scale is 1)."""
    if c.scale_rounding == "none":
        return raw
    if c.scale_rounding.startswith("e4m3"):  # (e4m3_unsaturated: the bug, ml_dtypes' NaN past 464)
        import ml_dtypes

        clamped = np.minimum(raw, f(448.0)) if c.scale_rounding == "e4m3" else raw
        return clamped.astype(ml_dtypes.float8_e4m3fn).astype(f)
    rule = c.scale_rounding
    value = amax if rule == "ocp_floor" else raw
    mantissa, exponent = np.frexp(value.astype(np.float64))
    floor = exponent - 1
    if rule == "ceil_pow2":
        e = np.where(mantissa == 0.5, floor, floor + 1)
    elif rule == "nearest_pow2":
        e = np.round(np.log2(np.where(value > 0, value, 1.0)))
    else:
        e = floor
    if rule == "ocp_floor":
        e = e - EMAX[c.quant_dtype]
    e = np.clip(e, -127, 127)
    return np.where(value > 0, np.ldexp(f(1.0), e.astype(np.int32)), f(1.0)).astype(f)
