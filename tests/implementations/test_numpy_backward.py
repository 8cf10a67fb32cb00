"""The own NumPy backward (implementations/numpy_backward.py) against the oracle's exact float64 VJP
(harness/engine/vjp.py), for every op@convention of the square statistics (the gate, if any, after
the norm) in float32, bfloat16 and float16 and every dw reduction order, within error bounds derived
here from the backward's own sequence of float32 operations (not fitted to what it measures), and
deliberately wrong backwards far outside them. LayerNorm and the grouped gated norm (the gate before
it) are tested against the exact VJP and the harness's budgets in test_numpy_backward_layer_norm.py.

Notation: u = 2^-24 (float32's unit roundoff), gamma_k = k u / (1 - k u) (k roundings in a row),
k(n) the roundings of numpy's partial pairwise float32 sum of n terms (`sum_depth`: 25 at n = 128,
22 at 1024, 26 at 16384; a running sum would be n - 1), m the input dtype's stored fraction bits.
Exact quantities (no hat) are float64 values of the very dtype inputs the backward got.

  r (the saved 1/rms): the squares and their sum are k(n) + 1 roundings of positive terms, / n,
    + eps and float32's eps one each: stat + eps is off by gamma_{k(n)+4} relative; the root halves
    that, the root and the reciprocal add one each:   delta_r = gamma_{k(n)+4} / 2 + gamma_2
  u = x r:    delta_u = delta_r + u; the Llama cast then rounds u to the dtype: half its ulp more.
  silu(z) = z s, s = 1 / (1 + exp(-z)): float32 exp within 4 ulp = 8u (asserted on every gate
    below), delta_s = gamma_10, delta_a = gamma_11.
  g = dy' (offset + w) [a]: RoPE's R^T dy in float32 is two products (of dy and the float32 cos /
    sin) and a sum, gamma_3 (|dy_i cos| + |dy_partner sin|); each later product or sum one u.
    mag_i = |offset + w_i| |a_i| (|dy_i cos| + |dy_partner sin|)  (>= |g_i|; |g_i| without RoPE)
  dx_i = r g_i - x_i r^3 c P,   P = sum_span(g x),   c = 1/n (mean_square) | 1 (sum_square):
    E_i = r (|g_i| (delta_r + u) + E_g_i)                                 the first term
        + |x_i| r^3 c ((3 delta_r + gamma_5) |P| + sum|x| E_g + gamma_{k(n)+1} sum|g x|)
                                                                          the second term
        + u |dx_i|                                                        their difference
    and the one rounding to the input dtype adds half its ulp at |dx_i| + E_i (none for float32).
  Where the error lives is P: gamma_{k(n)+1} sum|g x| is relative to the sum of the magnitudes,
    and P itself is a sum of terms of both signs (for a random dy ~sqrt(n) times smaller than
    sum|g x|), so against |dx_i| the bound is unbounded wherever r g_i and x_i r^3 c P cancel. It is
    measured against the scale of the two terms (as the judge counts a rotation's ULPs at its
    operands' magnitude):   S_i = r mag_i + |x_i| r^3 c sum_span(|x| mag)   (>= |dx_i|)
    With E_g <= 17u mag, |P| <= sum|g x| <= sum|x| mag and ulp(S) > u S that gives, in ULPs at S,
        float32:      E / ulp(S) < (2.5 k(n) + 36)                    (~100 at n = 16384)
        bf16 / fp16:  < 1 + (2.5 k(n) + 36) 2^(m - 23)                (the final rounding: half an
                      ulp at |dx| + E <= S + E, which is at most one ulp at S)
    (`dx_ulp_limit`); the elementwise bound E_i is what each element is checked against.
  dw_j = sum over the R (row, head) rows of T_ij = dy' [a] u; each float32 term is off by
    E_t = |T| (delta_u + gamma_2 [+ delta_a + u]) [+ RoPE's gamma_3 |a u| mag] [+ the Llama cast's
    half dtype ulp of |u| times |dy' a|], and
        E_j = sum_i E_t_ij + gamma_order sum_i |T_ij|,
    gamma_order = gamma_{R-1} (sequential), gamma_{min(R,128)-1 + ceil(R/128)-1} (blocked),
    gamma_{k(R)} (pairwise); float64: gamma64_{R-1} sum|T| and one rounding, u |dw_j|. Relative to
    |dw_j| this is (gamma_order + delta_t) sum|T| / |dw_j|: a sum of terms of both signs again.
  dgate = dy' v silu'(z), v = u (offset + w), silu' = s (1 + z (1 - s)): each rounding bounded in
    turn (`dgate_bound`), measured at S = |dy'| |v| s (1 + |z| (1 - s)).
  The fused add (add_rms_norm: h = x + residual; dy is {"y": dy, "residual_out": dh}): the backward
    runs all of the above at h^ as the forward normalised it (x + residual rounded to the input
    dtype, residual_dtype "input"; the float32 sum, "float32"), so every bound above is taken at
    h^, against the exact VJP at h^; then dx = dresidual = fl(dx_norm + dh): the float32 addition
    adds u |dx_norm + dh| (+ the error so far), the one rounding half an ulp, and S gains |dh|.
    The oracle's VJP is at the exact h, which h^ misses by delta = h^ - h (|delta| <= u_d |h| for
    the rounding, <= u |h| for the float32 sum): by the triangle inequality the bound adds
    |VJP(h^) - VJP(h)|, both exact (float64), for dx and dw (`_residual_shift`). In closed form
    (first order, eps inside, e = max |delta| / |h^| over the span): r moves by e, x_i by e_i, r^3
    by 3e and sum g x by e sum|g x|, so |shift dx_i| <= e (r |g_i| + 5 |x_i| r^3 c sum|g x|) <= 5 e S_i,
    5 e / u_d ULPs at S: `dx_ulp_limit` adds that (5 for "input", ~0 for "float32") and one u for
    the addition to the float32 part.
Second-order terms (products of two relative errors, each < 1e-4) are covered by a factor
1 + 2^-10 on the float32 part. Left out: underflow of float32 intermediates (nothing here comes
within 2^-100 of it) and the clamp's branch flipping at ||x|| = eps (asserted away).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest

from normdiff.cases.model import Case, CaseInputs
from normdiff.harness.data import rope
from normdiff.harness.data.conventions import CONVENTIONS, float_op_conventions
from normdiff.harness.data.dtypes import get_format
from normdiff.harness.data.knobs import KNOBS
from normdiff.harness.data.ops import get_op
from normdiff.harness.engine import judge
from normdiff.harness.engine.vjp import vjp
from normdiff.implementations import numpy_backward as nb

U = 2.0 ** -24  # float32 unit roundoff
U64 = 2.0 ** -53
F32 = get_format("float32")
SECOND_ORDER = 1.0 + 2.0 ** -10
EXP_ULPS = 4.0  # numpy's float32 exp is within this many ulp (asserted on every gate below)


def gamma(k, unit=U):
    return k * unit / (1.0 - k * unit)


def _pairwise_depth(n: int) -> int:
    """Roundings a term goes through in numpy's pairwise_sum of n terms (numpy/_core/src/umath/
    loops_utils.h.src): below 8 terms a running sum; up to 128, eight running sums of n//8 terms,
    combined in a 3-level tree, then the n % 8 left-overs one by one; above, two halves (the first a
    multiple of 8) summed recursively and added."""
    if n < 8:
        return max(n - 1, 0)
    if n <= 128:
        return n // 8 - 1 + 3 + n % 8
    half = n // 2
    half -= half % 8
    return 1 + max(_pairwise_depth(half), _pairwise_depth(n - half))


def sum_depth(n: int) -> int:
    """An upper bound on the roundings of np.sum over n contiguous float32 terms: the reduction may
    start from the first element and add the pairwise sum of the other n - 1 (one more rounding)."""
    return 1 + max(_pairwise_depth(n), _pairwise_depth(n - 1))


def order_gamma(order: str, rows: int) -> float:
    """gamma of the reduction of `rows` terms in `order` (numpy_backward.reduce_rows)."""
    if order == "sequential":
        return gamma(rows - 1)
    if order == "blocked":
        block = min(rows, nb.BLOCK_ROWS)
        return gamma(block - 1 + math.ceil(rows / nb.BLOCK_ROWS) - 1)
    if order == "pairwise":
        return gamma(sum_depth(rows))
    return gamma(rows - 1, U64)  # "float64": plus one rounding to float32, added by dw_bound


def dx_ulp_limit(dtype: str, n: int, residual_dtype: str = "") -> float:
    """The module docstring's closed form of the dx bound in ULPs of the input dtype at S; a fused
    add's (`residual_dtype`: where its sum is held) adds d residual_out's float32 addition and
    the shift of h^ from h (5 e / u_d)."""
    fused = bool(residual_dtype)
    f32_part = (2.5 * sum_depth(n) + 36 + fused) * SECOND_ORDER
    u_dtype = 2.0 ** -(get_format(dtype).mantissa_bits + 1)
    e = {"": 0.0, "input": u_dtype, "float32": U}[residual_dtype]
    shift = 5.0 * e / u_dtype * SECOND_ORDER
    if dtype == "float32":
        return f32_part + shift
    return 1.0 + f32_part * 2.0 ** (get_format(dtype).mantissa_bits - 23) + shift


def half_ulp(fmt, magnitude):
    """Half the format's spacing at |magnitude|: the most one rounding to nearest moves a value of
    at most that magnitude (subnormals included); 0 for float32, which the backward never rounds to
    (it computes in float32)."""
    if fmt.name == "float32":
        return np.zeros_like(np.asarray(magnitude, dtype=np.float64))
    return 0.5 * fmt.ulp(magnitude)


# ---- the exact quantities and the bounds -----------------------------------------------------

@dataclass
class Exact:
    """The float64 values of every quantity the backward computes, from the dtype values it got,
    and the magnitudes its roundings act on (all shaped like x, or per span)."""

    spans: np.ndarray  # x as (rows, heads, n)
    r: np.ndarray  # 1 / denominator, per span
    coef: np.ndarray  # r^3 c where the projection term exists, else 0
    delta_r: np.ndarray  # relative error bound of the computed r, per span
    u: np.ndarray  # x r, shaped like x
    dyr: np.ndarray  # the gradient reaching the norm (R^T dy with RoPE)
    e_dyr: np.ndarray  # bound on its float32 error
    mag_dyr: np.ndarray  # |dy_i cos| + |dy_partner sin| (RoPE) or |dy|
    act: np.ndarray | None = None  # silu(z)
    sig: np.ndarray | None = None
    z: np.ndarray | None = None
    w: np.ndarray | None = None  # offset + w, tiled to x's width
    e_w: np.ndarray | float = 0.0  # bound on the computed (offset + w)'s error


def fused_input(contract, inputs: CaseInputs) -> np.ndarray:
    """h^, the fused add's sum as numpy_backward normalises it (float64 values): x + residual
    rounded to the input dtype (residual_dtype "input", to nearest) or the float32 sum."""
    x, r = inputs.arrays["x"], inputs.arrays["residual"]
    assert contract.residual_order == "before_norm" and contract.residual_rounding == "nearest", contract
    if contract.residual_dtype == "float32":
        return (x.astype(np.float32) + r.astype(np.float32)).astype(np.float64)
    return get_format(x.dtype.name).round(x.astype(np.float64) + r.astype(np.float64))


def upstream_of_y(dy) -> np.ndarray:
    """The upstream gradient of y (a fused add's dy is {"y": dy, "residual_out": dh})."""
    return dy["y"] if isinstance(dy, dict) else dy


def as_float64(dy):
    return {k: np.asarray(v, np.float64) for k, v in dy.items()} if isinstance(dy, dict) else np.asarray(dy, np.float64)


def exact(contract, inputs: CaseInputs, dy: np.ndarray) -> Exact:
    a = inputs.as_float64()
    if "residual" in a:  # the fused add: everything at h^, the norm's input (module docstring)
        a = {"x": fused_input(contract, inputs), **{k: v for k, v in a.items() if k not in ("x", "residual")}}
    x = a["x"]
    fmt = get_format(inputs.arrays["x"].dtype.name)
    heads = inputs.num_heads if contract.scope == "head" else 1
    spans = x.reshape(x.shape[0], heads, -1)
    n = spans.shape[-1]
    mean = contract.statistic == "mean_square"
    c = 1.0 / n if mean else 1.0
    stat = c * np.sum(spans * spans, axis=-1, keepdims=True)
    k = sum_depth(n)
    eps32 = float(np.float32(contract.eps))
    if contract.eps_placement == "inside":
        d = np.sqrt(stat + contract.eps)
        live = np.ones_like(d, dtype=bool)
        # the squares and their sum, / n, + eps, and float32's eps (off the exact one by u relative)
        delta_r = np.full_like(d, gamma(k + 1 + mean + 2) / 2 + gamma(2))
    else:  # clamp: the root branch, or the constant eps branch
        root = np.sqrt(stat)
        d = np.maximum(root, contract.eps)
        live = root >= eps32
        assert np.all(np.abs(root - eps32) > 1e-3 * eps32), "a span's norm is at the clamp"
        delta_r = np.where(live, gamma(k + 1 + mean) / 2 + gamma(2), gamma(2))  # 1 / float32(eps)
    r = 1.0 / d
    coef = np.where(live, r ** 3 * c, 0.0)
    u = (spans * r).reshape(x.shape)
    dy = np.asarray(upstream_of_y(dy), dtype=np.float64)
    if "positions" in a:
        dyr, mag = _rope_transpose64(dy, a["positions"], inputs.num_heads, contract.rope_theta)
        e_dyr = gamma(3) * mag
    else:
        dyr, mag, e_dyr = dy, np.abs(dy), np.zeros_like(dy)
    ex = Exact(spans, r, coef, delta_r, u, dyr, e_dyr, mag)
    if "gate" in a:
        z = a["gate"]
        ex.z, ex.sig = z, 1.0 / (1.0 + np.exp(-z))
        ex.act = z * ex.sig
        z32 = inputs.arrays["gate"].astype(np.float32)
        e32, e64 = np.exp(-z32).astype(np.float64), np.exp(-z)
        assert np.all(np.abs(e32 - e64) <= EXP_ULPS * F32.ulp(e64)), "float32 exp beyond the bound's 4 ulp"
    if "weight" in a:
        w = contract.weight_offset + a["weight"]
        e_w = U * np.abs(w) if contract.weight_offset else np.zeros_like(w)  # float32 offset + w
        if contract.cast == "llama" and contract.weight_offset:
            e_w = e_w + half_ulp(fmt, np.abs(w) + e_w)  # rounded to the dtype (as the forward)
        reps = x.shape[-1] // w.shape[-1]
        ex.w, ex.e_w = np.tile(w, reps), np.tile(e_w, reps)
    return ex


def _rope_transpose64(dy, positions, num_heads, theta):
    """R^T dy in float64 (cos / sin of the float32 angles) and the magnitude of its two products."""
    dim = dy.shape[-1] // num_heads
    heads = dy.reshape(-1, num_heads, dim)
    ang = rope.angles(positions, dim, theta).astype(np.float64)[:, None, :]
    cos, sin = np.cos(ang), np.sin(ang)
    half = dim // 2
    lo, hi = heads[..., :half], heads[..., half:]
    out = np.concatenate([lo * cos + hi * sin, hi * cos - lo * sin], axis=-1)
    mag = np.concatenate([np.abs(lo * cos) + np.abs(hi * sin), np.abs(hi * cos) + np.abs(lo * sin)], axis=-1)
    return out.reshape(dy.shape), mag.reshape(dy.shape)


def _gate_value(ex: Exact):
    """(gv, E_gv, mag_gv): dy' [a] (the gradient reaching the weight), its error bound, and its
    operands' magnitude."""
    if ex.act is None:
        return ex.dyr, ex.e_dyr, ex.mag_dyr
    delta_a = gamma(11)  # s: exp (8u) + the sum (u) + the reciprocal (u); times z: u
    gv = ex.dyr * ex.act
    return gv, np.abs(ex.act) * ex.e_dyr + np.abs(gv) * (delta_a + U), np.abs(ex.act) * ex.mag_dyr


def _cast_u(contract, ex: Exact, fmt, llama: bool):
    """The error bound of the normalised value the weight multiplies (the Llama cast's rounded u)."""
    delta_u = np.broadcast_to(ex.delta_r + U, ex.spans.shape).reshape(ex.u.shape)
    e_u = np.abs(ex.u) * delta_u
    if llama:  # rounded to the input dtype (a no-op for float32)
        e_u = e_u + half_ulp(fmt, np.abs(ex.u) + e_u)
    return e_u


def dx_bound(contract, inputs: CaseInputs, dy, ex: Exact | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(B, S): the bound on |dx_computed - dx_exact| per element, and the scale S of the two terms
    dx is the difference of (module docstring)."""
    fmt = get_format(inputs.arrays["x"].dtype.name)
    ex = ex or exact(contract, inputs, dy)
    gv, e_gv, mag = _gate_value(ex)
    if ex.w is not None:
        g = gv * ex.w
        e_g = np.abs(ex.w) * e_gv + np.abs(gv) * ex.e_w + U * np.abs(g)
        mag = mag * np.abs(ex.w)
    else:
        g, e_g = gv, e_gv
    shape = ex.spans.shape
    gs, e_gs, xs = g.reshape(shape), e_g.reshape(shape), ex.spans
    n = shape[-1]
    p = np.sum(gs * xs, axis=-1, keepdims=True)
    abs_gx = np.sum(np.abs(gs * xs), axis=-1, keepdims=True)
    e_p = np.sum(np.abs(xs) * e_gs, axis=-1, keepdims=True) + gamma(sum_depth(n) + 1) * abs_gx
    mags = mag.reshape(shape)
    mean = contract.statistic == "mean_square"
    delta_coef = 3 * ex.delta_r + gamma(2 + mean)
    first = ex.r * (np.abs(gs) * (ex.delta_r + U) + e_gs)
    second = np.abs(xs) * ex.coef * (np.abs(p) * (delta_coef + gamma(2)) + e_p)
    dx = ex.r * gs - xs * ex.coef * p
    e32 = SECOND_ORDER * (first + second + U * np.abs(dx))
    scale = ex.r * mags + np.abs(xs) * ex.coef * np.sum(np.abs(xs) * mags, axis=-1, keepdims=True)
    shape = ex.u.shape
    dx, e32, scale = dx.reshape(shape), e32.reshape(shape), scale.reshape(shape)
    shift = 0.0
    if "residual" in inputs.arrays:  # + dh in float32, then the shift of h^ from h (module docstring)
        dh = np.asarray(dy["residual_out"], np.float64) if isinstance(dy, dict) else np.zeros(shape)
        dx = dx + dh
        e32 = e32 + SECOND_ORDER * U * (np.abs(dx) + e32)
        scale = scale + np.abs(dh)
        shift = _residual_shift(contract, inputs, dy)["x"]
    bound = e32 + half_ulp(fmt, np.abs(dx) + e32) + shift
    return bound, scale


def _residual_shift(contract, inputs: CaseInputs, dy) -> dict[str, np.ndarray]:
    """|VJP(h^) - VJP(h)| per operand, both exact (float64): what the fused add's rounded sum h^
    moves the exact gradient by (module docstring)."""
    a = inputs.as_float64()
    at_h = vjp(contract, a, as_float64(dy), inputs.num_heads)
    h_hat = {**a, "x": fused_input(contract, inputs), "residual": np.zeros_like(a["residual"])}
    at_h_hat = vjp(contract, h_hat, as_float64(dy), inputs.num_heads)
    return {k: np.abs(at_h_hat[k] - at_h[k]) for k in at_h}


def dw_bounds(contract, inputs: CaseInputs, dy, orders=nb.DW_ORDERS,
              ex: Exact | None = None) -> tuple[dict, np.ndarray]:
    """({order: B}, sum|T|): the bound on |dw_computed - dw_exact| per weight element for each
    reduction order, and the sum of the magnitudes of its terms."""
    fmt = get_format(inputs.arrays["x"].dtype.name)
    ex = ex or exact(contract, inputs, dy)
    gv, e_gv, _ = _gate_value(ex)
    e_u = _cast_u(contract, ex, fmt, contract.cast == "llama")
    terms = gv * ex.u
    e_t = np.abs(ex.u) * e_gv + np.abs(gv) * e_u + U * np.abs(terms)
    wlen = inputs.arrays["weight"].shape[-1]
    terms, e_t = terms.reshape(-1, wlen), e_t.reshape(-1, wlen)
    rows = terms.shape[0]
    abs_t = np.abs(terms).sum(axis=0)
    dw = terms.sum(axis=0)
    e_terms = e_t.sum(axis=0)
    shift = _residual_shift(contract, inputs, dy)["weight"] if "residual" in inputs.arrays else 0.0
    bounds = {}
    for order in orders:
        e = e_terms + order_gamma(order, rows) * (abs_t + e_terms)
        if order == "float64":
            e = e + U * (np.abs(dw) + e)
        bounds[order] = SECOND_ORDER * e + shift
    return bounds, abs_t


def dgate_bound(contract, inputs: CaseInputs, dy, ex: Exact | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(B, S) for dgate = dy' v silu'(z), S = |dy'| |v| s (1 + |z| (1 - s)) its operands' scale."""
    fmt = get_format(inputs.arrays["x"].dtype.name)
    ex = ex or exact(contract, inputs, dy)
    llama = contract.cast == "llama"
    e_u = _cast_u(contract, ex, fmt, llama)
    v = ex.u * ex.w
    e_v = np.abs(ex.w) * e_u + np.abs(ex.u) * ex.e_w
    e_v = e_v + U * (np.abs(v) + e_v)  # the float32 product (exact for two bf16 / fp16 factors)
    if llama:  # and the forward's product is in the input dtype: rounded to it (no-op for float32)
        e_v = e_v + half_ulp(fmt, np.abs(v) + e_v)
    s, z = ex.sig, ex.z
    delta_s = gamma(10)
    h = 1.0 + z * (1.0 - s)
    e_h = np.abs(z) * s * delta_s + 2 * U * np.abs(z) * (1.0 - s) + U * np.abs(h)
    d = s * h
    e_d = np.abs(h) * s * delta_s + s * e_h + U * np.abs(d)
    q = ex.dyr * v * d
    e_q = np.abs(v * d) * ex.e_dyr + np.abs(ex.dyr * d) * e_v + np.abs(ex.dyr * v) * e_d + gamma(2) * np.abs(q)
    e_q = SECOND_ORDER * e_q
    scale = ex.mag_dyr * np.abs(v) * s * (1.0 + np.abs(z) * (1.0 - s))
    return e_q + half_ulp(fmt, np.abs(q) + e_q), scale


# ---- measuring ---------------------------------------------------------------------------------

def upstream(case: Case):
    """dy ~ N(0, 1) in the case dtype, seeded by the case's input configuration; a fused add's
    {"y": dy, "residual_out": dh}, dh ~ N(0, 1) too (one upstream gradient per result)."""
    shape = (case.rows, case.width)
    dtype = get_format(case.dtype).np_dtype
    dy = np.random.default_rng([case.seed, 7]).standard_normal(shape).astype(dtype)
    if "residual_out" not in get_op(case.op).results:
        return dy
    return {"y": dy, "residual_out": np.random.default_rng([case.seed, 7, 1]).standard_normal(shape).astype(dtype)}


def _ratio(err, bound):
    return float(np.max(err / bound))


def measure(case: Case, orders=nb.DW_ORDERS, dy=None) -> dict:
    """Every figure of one case: dx (ULPs at |exact| as judge.ulp_distance counts them, ULPs at the
    scale S, the bound's ULPs at S, error / bound), dgate likewise, and per dw order: float32 ULPs
    at |exact dw|, max relative error, error / bound."""
    fmt = get_format(case.dtype)
    inputs = case.inputs()
    dy = upstream(case) if dy is None else dy
    c = case.contract
    ref = vjp(c, inputs.as_float64(), as_float64(dy), inputs.num_heads)
    out = {o: nb.backward(case.op, c, inputs, dy, o) for o in orders}
    first = out[orders[0]]
    fig = {"case": case.id}
    ex = exact(c, inputs, dy)
    bound, scale = dx_bound(c, inputs, dy, ex)
    fig |= _figures("dx", first["x"], ref["x"], bound, scale, fmt)
    if "residual" in ref:  # the fused add: the residual gets x's gradient, the very same bits
        assert np.array_equal(ref["residual"], ref["x"])
        assert all(np.array_equal(out[o]["residual"], out[o]["x"]) for o in orders)
        fig |= _figures("dresidual", first["residual"], ref["residual"], bound, scale, fmt)
    if "gate" in ref:
        bound, scale = dgate_bound(c, inputs, dy, ex)
        fig |= _figures("dgate", first["gate"], ref["gate"], bound, scale, fmt)
    if "weight" in ref:
        bounds, abs_t = dw_bounds(c, inputs, dy, orders, ex)
        for o in orders:
            dw = out[o]["weight"]
            assert dw.dtype == np.float32 and dw.shape == ref["weight"].shape
            err = np.abs(dw.astype(np.float64) - ref["weight"])
            bound = bounds[o]
            fig[f"dw_{o}_ulp"] = float(np.max(err / F32.ulp(ref["weight"])))
            fig[f"dw_{o}_rel"] = float(np.max(err / np.abs(ref["weight"])))
            fig[f"dw_{o}_ratio"] = _ratio(err, bound)
            fig[f"dw_{o}_rel_sum"] = float(np.max(err / abs_t))  # the error over sum|T|
            fig[f"dw_{o}_bound_rel_sum"] = float(np.max(bound / abs_t))  # the bound over sum|T|
    return fig


def _figures(name, out, exact_value, bound, scale, fmt) -> dict:
    assert out.dtype == fmt.np_dtype and out.shape == exact_value.shape
    o = out.astype(np.float64)
    assert np.isfinite(o).all()
    err = np.abs(o - exact_value)
    at_scale = judge.Reference(exact_value, fmt, floor=scale)  # ULPs at max(|exact|, S) = S
    return {f"{name}_ulp": judge.ulp_distance(o, exact_value, fmt)[0],
            f"{name}_ulp_scale": float(np.max(err / at_scale.ulp)),
            f"{name}_bound_ulp_scale": float(np.max(bound / at_scale.ulp)),
            f"{name}_ratio": _ratio(err, bound)}


# ---- the tests ---------------------------------------------------------------------------------

DTYPES = ("float32", "bfloat16", "float16")
ALL_PAIRS = float_op_conventions()


def _derived(op: str, conv: str) -> bool:
    """Whether the derivation above covers the contract: the square statistics (mean_square,
    sum_square) with the gate, if any, after the norm. LayerNorm's centring and the grouped norm's
    gate before it are judged against the harness's budgets instead
    (tests/implementations/test_numpy_backward_layer_norm.py)."""
    c = CONVENTIONS[conv].contracts[op]
    return c.statistic != "variance" and not (c.record.applies("gate_order") and c.gate_order == "gate_then_norm")


# the pairs the derived bounds are for (benchmarks/measure_backward.py measures these too)
PAIRS = [pair for pair in ALL_PAIRS if _derived(*pair)]
# (shape, regime, gate): a head width and a model width, a tall case (several 128-row blocks of the
# dw reduction) and a tiny-RMS one (where eps is part of the denominator)
ROW_SHAPES = (("8x128", "normal", "open"), ("64x1024", "normal", "closed"), ("512x256", "normal", "open"),
              ("8x1024", "tiny_rms:1e-3", "open"))
HEAD_SHAPES = (("8x4x128", "normal", ""), ("64x8x128", "head_scales:lognormal", ""), ("16x8x64", "normal", ""),
               ("8x4x128", "tiny_rms:1e-3", ""))


def has_heads(op: str) -> bool:
    return "num_heads" in get_op(op).dims


# the fused add's residual: the row shapes' gate column picks its regime too (an open gate's rows
# get a large residual, h ~ the residual; a closed gate's a normal one, h ~ x + N(0, 1))
RESIDUAL_FOR_GATE = {"open": "large", "closed": "normal"}


def make_case(op, convention, dtype, shape, regime="normal", gate="open") -> Case:
    record = get_op(op)
    choices = {}
    if record.operand("weight"):
        choices["weight"] = "trained"
    if record.operand("gate"):
        choices["gate"] = gate
    if record.operand("residual"):
        choices["residual"] = RESIDUAL_FOR_GATE[gate]
    return Case.of(op, convention, dtype, shape, regime=regime, **choices)


def _cases():
    for op, conv in PAIRS:
        for dtype in DTYPES:
            for shape, regime, gate in (HEAD_SHAPES if has_heads(op) else ROW_SHAPES):
                yield pytest.param(op, conv, dtype, shape, regime, gate, id=f"{op}@{conv}-{dtype}-{shape}-{regime}")


@pytest.mark.parametrize("op, conv, dtype, shape, regime, gate", list(_cases()))
def test_backward_is_within_its_derived_bounds(op, conv, dtype, shape, regime, gate):
    fig = measure(make_case(op, conv, dtype, shape, regime, gate))
    ratios = {k: v for k, v in fig.items() if k.endswith("_ratio")}
    assert all(v <= 1.0 for v in ratios.values()), (fig["case"], ratios)
    # the closed form of the elementwise bound, in ULPs of the input dtype at the two terms' scale
    case = make_case(op, conv, dtype, shape, regime, gate)
    fused = case.contract.residual_dtype if case.contract.record.applies("residual_dtype") else ""
    limit = dx_ulp_limit(dtype, case.span, fused)
    assert fig["dx_ulp_scale"] <= fig["dx_bound_ulp_scale"] <= limit, (fig, limit)


def _without_weight(case: Case) -> CaseInputs:
    """The inputs with offset + w = 1: the backward then computes g = dy, the weight left out of dx
    (the derived bounds are computed with the real weight)."""
    inputs = case.inputs()
    w = inputs.arrays["weight"]
    ones = np.full(w.shape, 1.0 - case.contract.weight_offset).astype(w.dtype)
    return CaseInputs({**inputs.arrays, "weight": ones}, inputs.num_heads)


WRONG_MARGIN = 10.0  # a wrong backward must be this many bounds away


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op, conv", PAIRS)
def test_a_wrong_backward_is_far_outside_the_bounds(op, conv, dtype, monkeypatch):
    shape = "8x4x128" if has_heads(op) else "8x128"
    case = make_case(op, conv, dtype, shape)
    inputs, dy = case.inputs(), upstream(case)
    ref = vjp(case.contract, inputs.as_float64(), as_float64(dy), inputs.num_heads)
    bound, scale = dx_bound(case.contract, inputs, dy)
    ulp = judge.Reference(ref["x"], get_format(dtype), floor=scale).ulp
    wrongs = {}
    if "weight" in inputs.arrays:  # g = dy instead of dy * (offset + w)
        wrongs["weight missing"] = nb.backward(op, case.contract, _without_weight(case), dy)["x"]
    # the projection term left out (dx = r g): the backward of x / rms with rms a constant
    monkeypatch.setattr(nb, "_projection", lambda g, spans: np.zeros_like(spans[..., :1]))
    wrongs["projection missing"] = nb.backward(op, case.contract, inputs, dy)["x"]
    for name, wrong in wrongs.items():
        err = np.abs(wrong.astype(np.float64) - ref["x"])
        # elementwise, and the worst ULPs at the scale against the bound's worst there
        margins = _ratio(err, bound), float(np.max(err / ulp) / np.max(bound / ulp))
        assert min(margins) >= WRONG_MARGIN, (name, margins)


def test_every_conventions_contract_is_supported_and_only_those_values_are_listed():
    used = {name: set() for name in nb.SUPPORTED}
    for conv in CONVENTIONS.values():
        for contract in conv.contracts.values():
            nb.check_supported(contract)
            for name in used:
                if contract.record.applies(name):
                    used[name].add(getattr(contract, name))
    assert {k: set(v) for k, v in nb.SUPPORTED.items()} == used


@pytest.mark.parametrize("op, conv", ALL_PAIRS)
def test_a_knob_value_no_convention_uses_raises_naming_it(op, conv):
    contract = CONVENTIONS[conv].contracts[op]
    case = make_case(op, conv, "float32", "2x1x4" if has_heads(op) else "2x8")
    inputs = case.inputs()
    for name, values in nb.SUPPORTED.items():
        if not contract.record.applies(name):
            continue
        for value in KNOBS[name].values:
            if value not in values:
                with pytest.raises(NotImplementedError, match=f"{name}={value!r}"):
                    nb.backward(op, contract.replace(**{name: value}), inputs, upstream(case))


def test_outputs_keys_dtypes_and_shapes():
    case = make_case("qk_norm_rope", "qwen3", "bfloat16", "4x2x8")
    out = nb.backward(case.op, case.contract, case.inputs(), upstream(case))
    assert list(out) == ["x", "weight"]
    assert out["x"].dtype == case.inputs().arrays["x"].dtype and out["weight"].dtype == np.float32
    assert out["weight"].shape == (8,)  # per head: summed over the heads that share it
    gated = make_case("gated_rms_norm", "qwen3.5", "float16", "4x16")
    out = nb.backward(gated.op, gated.contract, gated.inputs(), upstream(gated))
    assert list(out) == ["x", "gate", "weight"] and out["gate"].dtype == np.float16
    with pytest.raises(ValueError, match="dw_order"):
        nb.backward(gated.op, gated.contract, gated.inputs(), upstream(gated), dw_order="tree")
    with pytest.raises(ValueError, match="contract"):
        nb.backward("rms_norm", gated.contract, gated.inputs(), upstream(gated))


def test_the_reduction_orders_are_the_loops_they_name():
    rng = np.random.default_rng(0)
    rows = 2 * nb._CHUNK_ROWS + 300  # several chunks and a partial last block
    terms = (rng.standard_normal((rows, 3)) * 1e3 ** rng.integers(0, 3, (rows, 1))).astype(np.float32)
    seq = np.zeros(3, np.float32)
    for t in terms:
        seq = seq + t
    partials = []
    for start in range(0, rows, nb.BLOCK_ROWS):
        acc = np.zeros(3, np.float32)
        for t in terms[start:start + nb.BLOCK_ROWS]:
            acc = acc + t
        partials.append(acc)
    blocked = np.zeros(3, np.float32)
    for p in partials:
        blocked = blocked + p
    assert np.array_equal(nb.reduce_rows(terms, "sequential"), seq)
    assert np.array_equal(nb.reduce_rows(terms, "blocked"), blocked)
    assert np.array_equal(nb.reduce_rows(terms, "pairwise"), np.array([np.sum(terms[:, j]) for j in range(3)]))
    assert np.array_equal(nb.reduce_rows(terms, "float64"), terms.astype(np.float64).sum(0).astype(np.float32))
    assert not np.array_equal(seq, nb.reduce_rows(terms, "float64"))  # the orders really differ


def test_numpy_sums_within_the_pairwise_depth_bound():
    """The depth the bounds assume for np.sum: a sum of positive terms, each with its own error
    sign, is within gamma_{k(n)} of the exact sum (sequential order would need gamma_{n-1})."""
    rng = np.random.default_rng(1)
    for n in (7, 100, 128, 129, 1000, 16384):
        a = rng.random(n).astype(np.float32) + np.float32(1.0)
        err = abs(float(np.sum(a)) - float(np.sum(a.astype(np.float64))))
        assert err <= gamma(sum_depth(n)) * float(np.sum(np.abs(a.astype(np.float64))))
    assert sum_depth(128) == 25 and sum_depth(16384) == 26
