"""Own JAX implementation: the same steps and cast points as numpy_own, in jax.numpy.

Speed: XLA compiles every new (function, shapes, dtypes) in ~60-100 ms on CPU (and even a
persistent-cache hit costs ~25 ms of tracing, lowering and loading), so
  * one jitted function exists per distinct set of *static* knobs (the contract without eps and
    weight_offset, plus num_heads, which fixes the reshape); eps and the offset are traced scalars,
    so a new eps value never recompiles;
  * one program serves every dtype: the operands enter as float32 (exact for bfloat16 and float16)
    and the case's format is a traced index that selects each rounding (see `_round`), so float32,
    bfloat16 and float16 cases of one shape share a program (the default suite needs 61 programs
    instead of 170); outputs and gradients are cast back to the case dtype on the host (exact for
    outputs, which hold values of that dtype; the one rounding of each gradient otherwise);
  * rows are padded up to a power of two, so batches of concatenated cases reuse few shapes;
  * the persistent compilation cache is on (see `enable_compile_cache`), so a fresh worker loads
    compiled code (~12-15 ms) instead of compiling it again.

qk_norm_rope: the qk_norm steps, then RoPE in HF's order with explicit rounding: float32 angles
(positions are a traced int32 array, padded with zeros; the inverse frequencies are a host-side
float32 constant per (head_dim, theta), correctly rounded as the contract defines them, because
XLA's float32 pow is not), cos / sin in XLA float32 rounded to the input dtype, then the two
products and their sum each rounded to the input dtype.

add_rms_norm: numpy_own.add_norm's roundings, returning (y, residual_out). The sum x + residual is
taken in float32 with its exact error (TwoSum: JAX runs without float64), which is what rounding it
to nearest or truncating it toward zero needs to match numpy_own's float64 sum bit for bit.

layer_norm and group_gated_rms_norm: numpy_own's steps (the centring's float32 mean, the variance
over n - correction, one- or two-pass, the bias before or after the weight; the groups ride on the
head axis, as qk_norm's heads do), so the same per-static-key jit covers them.

Backward (`backward`): jax.vjp of this very forward, with respect to x, the weight, the gate and the bias,
jitted like the forward (one function per static key, eps and the offset traced, rows padded); every
gradient in the case dtype. The section before `backward` says what JAX's differentiation does at
the casts, and why its padding (not the forward's zeros) leaves dw exact.

Known differences from numpy_own. In float32 they leave ~36% of outputs an ulp or so apart (all
within 5 ulp of the oracle); in bf16/fp16 outputs are bit-identical on >= 99.99% of elements:
  * XLA CPU's rsqrt is not correctly rounded, and XLA rewrites 1 / sqrt into it: it differs from
    NumPy's 1 / sqrt on ~30% of float32 values (up to 3 ulp apart; 1.7 vs 1.5 ulp max error).
  * XLA turns a division by a constant n (the mean) into a multiplication by 1 / n.
  * stats_dtype="input" (a mutant): jnp.sum / jnp.mean of bfloat16/float16 accumulate in float32
    and round once, as torch does on CPU; NumPy's ml_dtypes bfloat16 sum accumulates in bfloat16
    and stagnates (the sum of 4096 squares of N(0,1) comes out ~2000), so there the two differ.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax

from normdiff.cases.model import CaseInputs
from normdiff.files import cache_dir
from normdiff.harness.data import contracts, rope
from normdiff.harness.data.contracts import Contract
from normdiff.harness.data.rope import MAX_EXACT_POSITION, inverse_frequencies
from normdiff.implementations import jax_programs, numpy_own
from normdiff.implementations.frameworks.jax import CACHE_ENV  # the one variable for both caches

_F32 = jnp.float32


def enable_compile_cache() -> str | None:
    """Turn on JAX's persistent compilation cache; returns its directory, or None when off.

    The directory is $NORMDIFF_JAX_CACHE (empty: no cache) or ~/.cache/normdiff/jax. An unwritable
    directory leaves the cache off: compiling again is slower, never wrong.
    """
    path = cache_dir(CACHE_ENV, "jax")
    if path is None:
        return None
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return path


CACHE_DIR = enable_compile_cache()
# the compiled programs themselves, kept beside JAX's cache: a repeat run loads each one instead of
# tracing and lowering it again (jax_programs.py); the files that define them are in the salt
PROGRAMS = jax_programs.Programs(CACHE_DIR, jax_programs.salt((__file__, contracts.__file__, rope.__file__)))

# ---------------------------------------------------------------------------------------------
# The maths, step by step as numpy_own. `c` carries only static knobs; eps and offsets are traced.
#
# Every step that numpy_own does in the input dtype is done here in float32 and rounded with
# `_round` (reduce_precision, which XLA must honour). Plain bfloat16 ops are not enough: XLA CPU
# computes them in float32, and with xla_allow_excess_precision (on by default) it dropped the
# rounding of the Llama-cast product `w * y.astype(bf16)` because the gate multiply widens it again
# (measured: 16% of gated bf16 outputs an ulp off numpy_own). For bfloat16 and float16, an op on two
# such values computed in float32 and rounded once is the correctly rounded op (float32 has
# >= 2p + 2 bits), which is also what NumPy and ml_dtypes compute.


# The formats a program can round to, by the traced index it takes (`format_index`).
FORMATS = (np.dtype(np.float32), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16))


def format_index(dtype) -> np.int32:
    return np.int32(FORMATS.index(np.dtype(dtype)))


# _round(v, fmt): float32 `v` rounded to the format `fmt` indexes (ties to even), kept as float32.
# The derivative of a rounding is taken as 1 (as autograd takes a .to(dtype)), and its cotangent is
# rounded to the format in turn: the transpose of the float32 -> dtype -> float32 round trip this
# emulates, so every gradient flowing into a value the forward holds in `dtype` is a `dtype` value,
# as in a pipeline that stores that value in `dtype`. Without this rule JAX would differentiate the
# steps of `_cast` itself, which goes wrong in float16 in two ways: reduce_precision's transpose
# flushes subnormal cotangents to zero (measured: 230-580 fp16 ulp errors in dx and dw with dy ~ 1e-4,
# the "tiny" gradient regime, on the Llama-cast conventions), and jnp.round's derivative is zero, so
# an element whose forward value is a float16 subnormal would pass no gradient at all. The forward
# value is unchanged: custom_vjp only replaces the derivative. The format index gets no cotangent.
@jax.custom_vjp
def _round(v, fmt):
    return _cast(v, fmt)


def _round_fwd(v, fmt):
    return _cast(v, fmt), fmt


def _round_bwd(fmt, ct):
    return _cast(ct, fmt), None


_round.defvjp(_round_fwd, _round_bwd)


def _cast(v, fmt):
    """`v` rounded to each format, the one `fmt` indexes selected: a select, not control flow, so
    XLA fuses it into the surrounding elementwise code as it fused the one rounding of a program per
    dtype (the default run's outputs are bit-identical to those programs', but for float32 RoPE,
    where the per-dtype program had contracted h * cos + r * sin into an FMA the selects now stop)."""
    return lax.select_n(fmt, v, *(_cast_to(v, dtype) for dtype in FORMATS[1:]))


def _cast_to(v, dtype):
    fi = jnp.finfo(dtype)
    r = lax.reduce_precision(v, exponent_bits=fi.nexp, mantissa_bits=fi.nmant)
    if fi.nexp < 8:  # reduce_precision flushes float16 subnormals to zero: round those by hand
        step = float(fi.smallest_subnormal)
        r = jnp.where(jnp.abs(v) < float(fi.smallest_normal), jnp.round(v / step) * step, r)
    return r


def _act(z, kind: str):
    sig = 1.0 / (1.0 + jnp.exp(-z))  # written out (not jax.nn.sigmoid) to match numpy_own
    return z * sig if kind == "silu" else sig


def _inverse_scale(xs, c: Contract, fmt, eps):
    """1 / (the denominator), float32, one value per normalised span (the denominator itself for
    the inverted contract)."""
    inverse = _reciprocal_denominator(xs, c, fmt, eps)
    return 1.0 / inverse if c.inverted else inverse


def _scaled_eps(xs, c: Contract, eps):
    """eps scaled as the contract says (eps_scale: the span's width, or its max x^2), float32."""
    if c.eps_scale == "span":
        return eps * np.float32(xs.shape[-1])
    if c.eps_scale == "max_square":
        peak = jnp.max(jnp.abs(xs), axis=-1, keepdims=True)
        return eps * peak * peak
    return eps


def _mean(xs, rnd, n):
    """The span's mean as numpy_own takes it: summed in float32, rounded (`rnd`: to the statistics
    dtype), then divided by n (in that dtype, rounded again)."""
    return rnd(rnd(xs.sum(-1, keepdims=True)) / n)


def _reciprocal_denominator(xs, c: Contract, fmt, eps):
    eps = _scaled_eps(xs, c, eps)
    low = c.stats_dtype == "input"
    rnd = functools.partial(_round, fmt=fmt) if low else (lambda v: v)

    def count(k):  # k in the statistics dtype (numpy_own's xs.dtype.type(k)), as float32
        return rnd(np.float32(k))

    xs = rnd(xs)
    width = xs.shape[-1]
    one_pass = c.statistic == "variance" and c.variance_form == "one_pass"
    if c.statistic == "variance" and not one_pass:
        xs = rnd(xs - _mean(xs, rnd, count(width)))
    stat = rnd(rnd(xs * xs).sum(-1, keepdims=True))
    if c.statistic != "sum_square":
        stat = rnd(stat / count(width - (c.correction if c.statistic == "variance" else 0)))
    if one_pass:  # E[x^2] - E[x]^2 in numpy_own's order: ((m * m) * n) / (n - correction)
        mean = _mean(xs, rnd, count(width))
        stat = rnd(stat - rnd(rnd(rnd(mean * mean) * count(width)) / count(width - c.correction)))
    if c.eps_placement == "inside":
        return lax.rsqrt(stat + eps)
    if c.eps_placement == "outside":
        return 1.0 / (jnp.sqrt(stat) + eps)
    if c.eps_placement == "clamp":
        return 1.0 / jnp.maximum(jnp.sqrt(stat), eps)
    return 1.0 / jnp.sqrt(stat)  # "none": a zero span gives NaN, as the buggy code does


def _scale(w, c: Contract, fmt, offset_f32, offset_in):
    """offset + w (w float32), in float32 or (the mutant) rounded to the input dtype."""
    if c.offset_dtype == "input":
        return _round(w + offset_in, fmt)
    return w + offset_f32


def _rope(q, positions, fmt, *, heads: int, theta: float):
    """q (rows, H * D) float32 holding values of the format; returns the same, rotated in it."""
    rows, width = q.shape
    dim = width // heads
    inv = inverse_frequencies(dim, theta)
    angles = positions.astype(_F32)[:, None] * inv[None, :]  # one float32 rounding
    emb = jnp.concatenate([angles, angles], axis=-1)[:, None, :]
    cos, sin = _round(jnp.cos(emb), fmt), _round(jnp.sin(emb), fmt)
    h = q.reshape(rows, heads, dim)
    half = dim // 2
    rotated_half = jnp.concatenate([-h[..., half:], h[..., :half]], axis=-1)
    out = _round(_round(h * cos, fmt) + _round(rotated_half * sin, fmt), fmt)
    return out.reshape(rows, width)


def _forward(arrays, eps, offset_f32, offset_in, fmt, *, c: Contract, heads: int, rope_heads: int = 0):
    """The op on float32 operands holding values of the format `fmt` indexes; its results are
    float32 holding values of that format."""
    x = arrays["x"]
    if "residual" in arrays:  # add_rms_norm: (y, residual_out)
        return _add_norm(arrays, eps, offset_f32, offset_in, fmt, c, heads)
    if c.op == "qk_norm_rope":
        turn = functools.partial(_rope, positions=arrays["positions"], fmt=fmt, heads=rope_heads,
                                 theta=c.rope_theta)
        if c.rope_order == "rope_then_norm":
            return _norm(dict(arrays, x=turn(x)), eps, offset_f32, offset_in, fmt, c, heads)
        return turn(_norm(arrays, eps, offset_f32, offset_in, fmt, c, heads))
    return _norm(arrays, eps, offset_f32, offset_in, fmt, c, heads)


def _add_norm(arrays, eps, offset_f32, offset_in, fmt, c: Contract, heads: int):
    """numpy_own.add_norm: h = x + residual; residual_out = h rounded once to the input dtype (to
    nearest, or truncated toward zero); the norm of h rounded to the input dtype (residual_dtype
    "input") or of the float32 sum ("float32"); residual_order "after_norm" (a bug): y = norm(x) +
    residual in float32, rounded once. Returns (y, residual_out), both in the input dtype."""
    x, r = arrays["x"], arrays["residual"]
    rest = {k: v for k, v in arrays.items() if k not in ("x", "residual")}
    s = x + r
    # numpy_own sums in float64, which JAX (x64 off) has not: the float32 sum's exact error
    # (Knuth's TwoSum, exact in float32 arithmetic) tells which way nearest rounded
    err = _two_sum_error(x, r, s)
    out = _round(s, fmt) if c.residual_rounding != "truncate" else _truncated(s, err, fmt)
    if c.residual_order == "after_norm":
        y = _norm({"x": x, **rest}, eps, offset_f32, offset_in, fmt, c, heads)
        return _round(y + r, fmt), out
    normed = s if c.residual_dtype == "float32" else out
    return _norm({"x": normed, **rest}, eps, offset_f32, offset_in, fmt, c, heads), out


def _two_sum_error(a, b, s):
    """(a + b) - s exactly, for s = fl(a + b) (float32): TwoSum's error term, itself a float32."""
    bb = s - a
    return (a - (s - bb)) + (b - bb)


# The truncation's derivative is the rounding's (the identity, the cotangent rounded to the format),
# as torch_own's straight-through truncation: only the forward value steps toward zero.
@jax.custom_vjp
def _truncated(s, err, fmt):
    return _truncate(s, err, fmt)


def _truncated_fwd(s, err, fmt):
    return _truncate(s, err, fmt), fmt


def _truncated_bwd(fmt, ct):
    return _cast(ct, fmt), jnp.zeros_like(ct), None


_truncated.defvjp(_truncated_fwd, _truncated_bwd)


def _truncate(s, err, fmt):
    """The exact sum s + err (float32 s, its float32 error) in the format, truncated toward zero,
    held in float32: round to nearest, then one step back toward zero where that went away from it
    (numpy_own._to_dtype; the magnitude's bits - 1 for bf16 / fp16, nextafter toward 0 for float32)."""
    near = _round(s, fmt)
    beyond = (near - s) - err  # near - (s + err): exact where its sign matters
    away = ((near > 0) & (beyond > 0)) | ((near < 0) & (beyond < 0))  # |near| > |exact|; never at 0
    stepped = lax.select_n(fmt, jnp.nextafter(near, jnp.zeros_like(near)),
                           *(_step_toward_zero(near, dtype) for dtype in FORMATS[1:]))
    return jnp.where(away, stepped, near)


def _step_toward_zero(near, dtype):
    """`near` (float32 holding a value of the 16-bit `dtype`) one step toward zero in `dtype`:
    its magnitude's bits - 1 (garbage where `near` is not of `dtype`: the select drops it)."""
    bits = lax.bitcast_convert_type(near.astype(dtype), jnp.uint16)
    return lax.bitcast_convert_type(bits - jnp.uint16(1), dtype).astype(_F32)


def _tiled(v, width: int):
    """A per-case operand (weight, bias) across the row: a per-head one is shared by every head."""
    return v if v.shape[-1] == width else jnp.tile(v, width // v.shape[-1])


def _norm(arrays, eps, offset_f32, offset_in, fmt, c: Contract, heads: int):
    """The norm of arrays["x"] (float32), its rounding points in the format `fmt` indexes (a fused
    add's float32 sum is normalised into the case's format too)."""
    x = arrays["x"]
    xf = x
    gate = _act(arrays["gate"], c.gate_activation) if "gate" in arrays else None
    if gate is not None and c.gate_order == "gate_then_norm":
        xf = xf * gate
    spans = xf.reshape(*xf.shape[:-1], heads, -1)
    inverse = _inverse_scale(spans, c, fmt, eps)
    if c.centre:  # LayerNorm: the centred x (the float32 mean) over the denominator
        spans = spans - _mean(spans, lambda v: v, np.float32(spans.shape[-1]))
    y = (spans * inverse).reshape(xf.shape)
    bias = _tiled(arrays["bias"], x.shape[-1]) if "bias" in arrays else None
    if bias is not None and "weight" in arrays and c.bias_order == "before_scale":
        y = y + bias
    if "weight" in arrays:
        scale = _scale(_tiled(arrays["weight"], x.shape[-1]), c, fmt, offset_f32, offset_in)
        if c.cast == "llama":  # round the normalised value first, multiply in the input dtype
            y = _round(_round(scale, fmt) * _round(y, fmt), fmt)
        else:
            y = y * scale
    if bias is not None and (c.bias_order == "after_scale" or "weight" not in arrays):
        y = y + bias
    if gate is not None and c.gate_order == "norm_then_gate":
        y = y * gate
    return _round(y, fmt)


# ---------------------------------------------------------------------------------------------
# Jitted functions, one per static key, and the adapter.

_JITTED: dict[tuple, object] = {}


def static_key(c: Contract, num_heads: int) -> tuple:
    """What fixes the traced program: every knob but the traced eps and offset, and the heads (the
    norm's span count; RoPE also needs the real head count, whatever the norm's scope)."""
    heads = num_heads if c.scope == "head" else 1
    key = (c.replace(eps=0.0, weight_offset=0.0), heads)
    return key + (num_heads,) if c.op == "qk_norm_rope" else key


def jitted(c: Contract, num_heads: int):
    key = static_key(c, num_heads)
    fn = _JITTED.get(key)
    if fn is None:
        extra = {"rope_heads": key[2]} if len(key) > 2 else {}
        fn = _JITTED[key] = jax.jit(functools.partial(_forward, c=key[0], heads=key[1], **extra))
    return fn


# Fewer rows than this are padded up to it: each distinct row count is a program to trace and
# compile (or load from the cache, ~60 ms each here), and 64 rows of even the widest case (7168) are
# a few hundred microseconds of work. The default suite's forward calls need 119 programs instead
# of 158 with powers of two from 1 (benchmarks/bench_run.py measures the run).
MIN_PADDED_ROWS = 64


def padded_rows(n: int) -> int:
    """The next power of two >= n, at least MIN_PADDED_ROWS, so that batches of different sizes
    share compiled shapes."""
    return max(MIN_PADDED_ROWS, 1 << max(n - 1, 0).bit_length())


def _pad(a: np.ndarray, rows: int) -> np.ndarray:
    # zero rows are harmless: rows are independent and eps keeps them finite ("none" gives NaN
    # there, in padded rows only, which are sliced off); padded positions are 0
    if a.shape[0] == rows:
        return a
    out = np.zeros((rows, *a.shape[1:]), a.dtype)
    out[: a.shape[0]] = a
    return out


def _operands(inputs: CaseInputs, n: int, rows: int, pad) -> dict[str, np.ndarray]:
    """The arrays as `_forward` takes them, the float ones in float32 (exact): x, the residual and
    the gate as (rows, width), padded by `pad`; the weight and the bias as they are; positions flat
    int32 (padded with zeros), checked."""
    a = inputs.arrays
    width = np.shape(a["x"])[-1]
    arrays = {}
    for name in ("x", "residual", "gate"):  # per row
        if name in a:
            arrays[name] = pad(_float32(a[name]).reshape(n, width), rows)
    for name in ("weight", "bias"):  # per case: as they are
        if name in a:
            arrays[name] = _float32(a[name])
    if "positions" in a:
        positions = np.asarray(a["positions"]).reshape(-1)
        if positions.shape[0] != n:
            raise ValueError(f"{positions.shape[0]} positions for {n} rows")
        if positions.size and np.abs(positions).max() >= MAX_EXACT_POSITION:
            raise ValueError("RoPE positions must be below 2^24 (exact in float32)")
        arrays["positions"] = _pad(positions.astype(np.int32), rows)  # JAX's default int width
    return arrays


def _float32(a) -> np.ndarray:
    return np.asarray(a).astype(np.float32, copy=False)


def _scalars(contract: Contract, dtype) -> tuple:
    # the offset twice: rounded once to float32 and once to the input dtype (held in float32), as
    # numpy_own's _F32(offset) and weight.dtype.type(offset) do; then the format's index
    offset = contract.weight_offset
    return (np.float32(contract.eps), np.float32(offset), np.float32(np.asarray(offset, dtype)),
            format_index(dtype))


def run(op: str, contract: Contract, inputs: CaseInputs) -> np.ndarray | tuple[np.ndarray, ...]:
    """The op's output: y, or for a fused add the tuple (y, residual_out); a quantizing op's (q, scale)."""
    if contract.record.quantizes:
        return quantizing(op, contract, inputs)
    x = np.asarray(inputs.arrays["x"])
    dtype = x.dtype
    n = int(np.prod(x.shape[:-1], dtype=np.int64))
    several = "residual" in inputs.arrays
    if n == 0:
        return (np.empty(x.shape, dtype),) * 2 if several else np.empty(x.shape, dtype)
    rows = padded_rows(n)
    arrays = _operands(inputs, n, rows, _pad)
    out = PROGRAMS.call(("forward", static_key(contract, inputs.num_heads)), jitted(contract, inputs.num_heads),
                        arrays, *_scalars(contract, dtype))

    def kept(v):  # in the case dtype (exact: the program's float32 holds values of it), padding dropped
        return np.asarray(v)[:n].astype(dtype).reshape(x.shape)
    return tuple(kept(v) for v in out) if several else kept(out)


# ---------------------------------------------------------------------------------------------
# The backward pass: jax.vjp of the very `_forward` that `run` jits (same knobs, same casts, the
# same traced eps and offsets), with respect to its float operands x, weight, gate and bias
# (positions are integers: no gradient). Compiled once per static key, like the forward, and per
# shape and dtype; rows are padded to a power of two as in `run`, so different batch sizes share programs.
#
# What the gradients are, dtype by dtype: each in its operand's dtype (the case dtype). dx, dw and
# dgate come out of the float32 computation and are rounded once to the case dtype on the host (as a
# pipeline holding the operand in that dtype would round the transpose of its `.astype(float32)`;
# float32: no rounding). A per-head weight tiled across the row gets the transpose of jnp.tile: its
# gradient summed over the heads (in float32, before that rounding). The forward's roundings to the
# input dtype (`_round`: the Llama cast, RoPE's products, the output) round the cotangent in turn
# (see `_round`).
#
# Why the padding cannot change dw (or anything kept): rows are independent, so padded rows only
# reach the weight's gradient, a sum over rows of (the cotangent at the weight's product) x (the
# forward value it multiplies). dy is padded with zero rows, so that cotangent is exactly 0 in
# padded rows through every stage (the gate, RoPE's rotation, the roundings: 0 times a finite
# number, rounded, is 0), and each padded row adds an exact 0 to the float32 sum - provided the
# padded rows' forward values are finite, since 0 x NaN = NaN. Zero rows (the forward's padding)
# are not enough for that: with eps_placement "none", eps_scale "max_square" or eps = 0 a zero row
# normalises to 0/0 = NaN and would turn all of dw into NaN. So x is padded with rows of
# alternating +1 / -1 (a span that is not constant and not zero: every statistic, the variance
# included, is positive; exact in every dtype) and the gate with ones (so a gate applied before the
# norm does not zero them); the padded rows' dx and dgate are sliced off. (A zero contribution can
# still move XLA's summation tree, i.e. which real terms are added together first: padding leaves
# the exact sum unchanged, not necessarily its float32 rounding.)

_JITTED_BACKWARD: dict[tuple, object] = {}


def _backward(arrays, dy, eps, offset_f32, offset_in, fmt, *, c: Contract, heads: int, rope_heads: int = 0):
    """J^T dy of `_forward` with respect to its float operands: {"x", "residual", "weight", "gate",
    "bias"}, in float32; dy is the cotangent of `_forward`'s output (a fused add's: the tuple (dy,
    dresidual_out))."""
    floats = {k: v for k, v in arrays.items() if jnp.issubdtype(v.dtype, jnp.floating)}
    ints = {k: v for k, v in arrays.items() if k not in floats}  # positions

    def forward(f):
        return _forward({**f, **ints}, eps, offset_f32, offset_in, fmt, c=c, heads=heads, rope_heads=rope_heads)

    _, pull = jax.vjp(forward, floats)
    return pull(dy)[0]


def jitted_backward(c: Contract, num_heads: int):
    """The jitted `_backward` for the contract's static key (the same key as `jitted`)."""
    key = static_key(c, num_heads)
    fn = _JITTED_BACKWARD.get(key)
    if fn is None:
        extra = {"rope_heads": key[2]} if len(key) > 2 else {}
        fn = _JITTED_BACKWARD[key] = jax.jit(functools.partial(_backward, c=key[0], heads=key[1], **extra))
    return fn


def pad_nonzero(a: np.ndarray, rows: int) -> np.ndarray:
    """`a` (rows first) padded to `rows` with rows of alternating +1 / -1: finite forward values in
    the padded rows under every contract (see above)."""
    if a.shape[0] == rows:
        return a
    fill = np.ones(a.shape[1:], a.dtype)
    fill[..., 1::2] = -1
    return np.concatenate([a, np.broadcast_to(fill, (rows - a.shape[0], *a.shape[1:]))])


def _pad_ones(a: np.ndarray, rows: int) -> np.ndarray:
    if a.shape[0] == rows:
        return a
    return np.concatenate([a, np.ones((rows - a.shape[0], *a.shape[1:]), a.dtype)])


def backward(op: str, contract: Contract, inputs: CaseInputs, dy) -> dict[str, np.ndarray]:
    """The gradients of `run(op, contract, inputs)` for the upstream gradient `dy` (x's shape, in
    the case dtype; for a fused add {"y": dy, "residual_out": dresidual_out}, one per result, dy
    alone meaning dresidual_out = 0 as in the oracle's VJP):
    {"x": dx, "residual": dresidual, "weight": dw, "gate": dgate, "bias": db} for the float operands
    the case has, in the operands' order, each shaped like its operand and in its dtype (the case
    dtype). A fused add's two cotangents meet at h in float32, the sum rounded once to the dtype."""
    a = inputs.arrays
    x = np.asarray(a["x"])
    dtype, width = x.dtype, x.shape[-1]
    several = "residual" in a  # a fused add: (y, residual_out), a cotangent each
    upstream = dict(dy) if isinstance(dy, dict) else {"y": dy}
    if several and "residual_out" not in upstream:  # dy of y alone: residual_out's is 0 (the VJP's rule)
        upstream["residual_out"] = np.zeros_like(np.asarray(upstream["y"]))
    for name, g in upstream.items():
        g = np.asarray(g)
        what = "dy" if name == "y" else f"d{name}"
        if g.shape != x.shape:
            raise ValueError(f"{what} has shape {g.shape}, x has {x.shape}")
        if g.dtype != dtype:  # the cotangent of the output: the output's (the case's) dtype
            raise ValueError(f"{what} is {g.dtype}; the output, and so {what}, is {dtype}")
    n = int(np.prod(x.shape[:-1], dtype=np.int64))
    rows = padded_rows(n)  # n = 0 works too: one padded row, dw = 0
    arrays = _operands(inputs, n, rows, pad_nonzero)
    if "gate" in arrays:
        arrays["gate"] = _pad_ones(_float32(a["gate"]).reshape(n, width), rows)
    order = ("y", "residual_out") if several else ("y",)  # the forward's results, in order
    cotangents = tuple(_pad(_float32(upstream[name]).reshape(n, width), rows) for name in order)
    grads = PROGRAMS.call(("backward", static_key(contract, inputs.num_heads)),
                          jitted_backward(contract, inputs.num_heads),
                          arrays, cotangents if several else cotangents[0], *_scalars(contract, dtype))
    out = {}
    for name in a:
        if name in grads:
            g = np.asarray(grads[name])
            per_case = name in ("weight", "bias")  # not padded: shaped as given
            # the one rounding of each gradient to its operand's (the case's) dtype
            out[name] = g.astype(dtype) if per_case else g[:n].astype(dtype).reshape(x.shape)
    return out


# ---------------------------------------------------------------------------------------------
# Quantizing norms: y from the plain op's program (on float32 copies of the inputs where the
# contract keeps y in float32: every input dtype's values are exact in float32, and the statistics
# are float32 anyway), then the scale and q in one program per contract and shape (ops/quantize.py
# has the maths; JAX casts a float32 to float8 / float4 rounding to nearest even once).

def quantizing(op: str, contract: Contract, inputs: CaseInputs) -> tuple:
    base_op = "add_rms_norm" if op.startswith("add_") else "rms_norm"
    base = contract.replace(op=base_op)
    keep32 = contract.quant_input == "float32"
    arrays = {n: a.astype(np.float32) for n, a in inputs.arrays.items()} if keep32 else inputs.arrays
    given = CaseInputs(arrays, inputs.num_heads, inputs.layout)
    out = run(base_op, base, given)
    y = (out[0] if isinstance(out, tuple) else out).astype(np.float32)
    source = y
    if contract.scale_from == "normalised":  # the bug: the amax of the value before the weight
        bare = CaseInputs({**arrays, "weight": np.zeros_like(arrays["weight"])}, inputs.num_heads, inputs.layout)
        plain = run(base_op, base.replace(weight_offset=1.0), bare)
        source = (plain[0] if isinstance(plain, tuple) else plain).astype(np.float32)
    t = inputs.arrays.get("tensor_scale")  # rms_norm_quant_static's per-tensor scale (float32)
    given = jnp.asarray(np.float32(1.0) if t is None else t.reshape(-1)[0].astype(np.float32))
    q, scale = _quantize(jnp.asarray(y), jnp.asarray(source), given, contract, t is not None)
    q, scale = np.asarray(q), np.asarray(scale)
    if op.startswith("add_"):
        x, r = inputs.arrays["x"], inputs.arrays["residual"]
        return q, scale, (x.astype(np.float64) + r.astype(np.float64)).astype(x.dtype)  # h rounded once
    return q, scale


@functools.partial(jax.jit, static_argnames=("c", "has_given"))
def _quantize(y, source, given, c: Contract, has_given: bool):
    """q and the float32 scales (numpy_own.quantize_values says how a given per-tensor scale is used)."""
    n = y.shape[-1] if not c.quant_group else c.quant_group
    blocks = y.reshape(*y.shape[:-1], y.shape[-1] // n, n)
    if has_given and c.tensor_scale != "global":
        scale = jnp.broadcast_to(given, blocks.shape[:-1])
        t = blocks * (_F32(1.0) / given if c.tensor_scale == "divisor" else given)
    else:
        scale, t = _block_scales(blocks, source.reshape(blocks.shape), c, given if has_given else None)
    integer = c.quant_dtype == "int8"
    if c.saturate or integer:
        low = -c.quant_max - 1.0 if integer and c.quant_max == 127.0 else -c.quant_max
        t = jnp.clip(t, low, min(c.quant_max, 127.0) if integer else c.quant_max)
    t = t.reshape(y.shape)
    if integer:
        rounding = {"nearest": jnp.round, "truncate": jnp.trunc,
                    "half_away": lambda v: jnp.sign(v) * jnp.floor(jnp.abs(v) + 0.5)}[c.quant_rounding]
        return rounding(t).astype(jnp.int8), scale
    return t.astype(getattr(jnp, c.quant_dtype)), scale


def _block_scales(blocks, source, c: Contract, g):
    """Each block's float32 scale and the quotients; NVFP4's (a global scale g) in TensorRT-LLM's
    order: scale = e4m3(g * (amax * (1 / 6))), y * (1 / (scale * (1 / g)))."""
    amax = jnp.abs(source).max(-1)
    if c.amax_floor:
        amax = (jnp.maximum if c.amax_bound == "floor" else jnp.minimum)(amax, _F32(c.amax_floor))
    raw = amax / _F32(c.quant_max) if g is None else g * (amax * (_F32(1.0) / _F32(c.quant_max)))
    scale = raw if c.scale_rounding == "none" else _pow2(raw, amax, c)
    scale = jnp.maximum(scale, _F32(c.scale_floor))
    if g is not None:
        s = (scale * (_F32(1.0) / g))[..., None]
        return scale, jnp.where(s != 0, blocks * (_F32(1.0) / jnp.where(s != 0, s, 1.0)), 0.0)
    s = scale[..., None]
    return scale, blocks / s if not c.zero_guard else jnp.where(s != 0, blocks / jnp.where(s != 0, s, 1.0), 0.0)


def _pow2(raw, amax, c: Contract):
    """The scale as the contract rounds it: to E4M3 (saturating at 448: NVFP4's block scale) or to
    a power of two from frexp's exact exponent (a zero block's is 1)."""
    if c.scale_rounding.startswith("e4m3"):
        clamped = jnp.minimum(raw, _F32(448.0)) if c.scale_rounding == "e4m3" else raw
        return clamped.astype(jnp.float8_e4m3fn).astype(_F32)
    value = amax if c.scale_rounding == "ocp_floor" else raw
    mantissa, exponent = jnp.frexp(value)
    floor = exponent - 1
    if c.scale_rounding == "ceil_pow2":
        e = jnp.where(mantissa == 0.5, floor, floor + 1)
    elif c.scale_rounding == "nearest_pow2":
        e = jnp.round(jnp.log2(jnp.where(value > 0, value, 1.0))).astype(jnp.int32)
    else:
        e = floor
    if c.scale_rounding == "ocp_floor":
        e = e - numpy_own.EMAX[c.quant_dtype]
    e = jnp.clip(e, -127, 127)
    return jnp.where(value > 0, jnp.ldexp(jnp.ones_like(value), e), 1.0).astype(_F32)
