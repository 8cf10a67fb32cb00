"""Own NumPy backward pass, written the way training kernels write it (Liger's and apex's fused
RMSNorm backward, llm.c's layernorm and rmsnorm backward): inputs in the case dtype, every step in float32.

    backward(op, contract, inputs, dy, dw_order="blocked") -> {"x": dx, "weight": dw, "gate": dgate}

(the keys of the differentiable operands the op takes; positions get none). What it computes, in
float32, per normalised span of n (a head, or the whole row; `contract.scope`):
  RoPE (qk_norm_rope, the norm before RoPE): the upstream gradient is first rotated back,
        dy' = R^T dy = dy * cos - rotate_half(dy) * sin, with float32 cos / sin (correctly rounded)
        of the same float32 angles the forward uses (harness/data/rope.py). Fused: dy' stays float32
        (a pipeline that runs RoPE's backward as its own kernel would round dy' to the dtype here).
  r     the forward's saved statistic, recomputed as numpy_own computes it: float32 squares summed
        in float32, / n for mean_square, r = 1 / sqrt(stat + eps) ("inside") or
        1 / max(sqrt(stat), eps) ("clamp", F.normalize).
  u     x * r, the normalised value, rounded to the input dtype when the contract's cast is "llama"
        (the forward multiplies the weight into that rounded value; the rounding's derivative is
        taken as 1, as autograd takes a .to(dtype)).
  gate  (gated_rms_norm, norm then gate) a = silu(z) in float32; v = u * (offset + w) the forward's
        pre-gate value (for the Llama cast rounded to the dtype, as the forward's product is);
        dgate = dy * v * silu'(z), silu' = s (1 + z (1 - s)), s = sigmoid(z) in float32.
  g     dy' * (offset + w) [* a]  (offset + w in float32; the dtype's rounding of it for the Llama
        cast, whose forward multiplies by the rounded value)
  dx    r * g - x * (r^3 / n * sum(g * x))     (mean_square; sum_square drops the 1 / n; the
        clamp's eps branch, where max(sqrt(stat), eps) = eps, has no second term), the sum over
        the span in float32 (np.sum: numpy's partial pairwise summation), rounded once to the
        input dtype at the end.
  dw    sum over rows of the per-row contributions dy' [* a] * u (float32 terms; u rounded at the
        Llama cast point as the forward rounds it, which is Liger's casting_mode="llama"), over
        (row, head) pairs for a per-head weight (the weight's gradient summed over the heads that
        share it), in the reduction order `dw_order`:
          "sequential"  row by row into one float32 accumulator (llm.c's dweight[i] += ...)
          "blocked"     float32 partial sums over blocks of 128 rows, each row by row, then the
                        partials summed row by row in float32 (Liger's per-program float32 _dW
                        rows, there n_rows / SM-count rows each, then their sum; apex likewise)
          "pairwise"    np.sum over the rows in float32 (numpy's partial pairwise summation)
          "float64"     the float32 terms summed in float64 and rounded once to float32
        dw is returned in float32 whatever the input dtype: kernels accumulate it in float32 and
        the optimizer's weight is a float32 master copy in mixed-precision training (a kernel that
        casts dw to a bf16 weight's dtype, as Liger's .to(W.dtype) then does, adds one rounding).
  dgate returned in the input dtype (one rounding).

Contracts: every knob value some convention's contract uses (harness/data/conventions.py); a knob
value none uses (eps outside the root, a scaled eps, the variance statistic, statistics or offset in
the input dtype, the inverted rsqrt, a sigmoid gate, the gate before the norm, RoPE before the norm)
raises NotImplementedError naming it. Like numpy_own it reads the contract's knobs and the arrays it
is given (a weight, a gate, positions), never the op's name.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from normdiff.harness.data.rope import angles as rope_angles

if TYPE_CHECKING:
    from normdiff.cases.model import CaseInputs
    from normdiff.harness.data.contracts import Contract

_F32 = np.float32
DW_ORDERS = ("sequential", "blocked", "pairwise", "float64")
BLOCK_ROWS = 128  # rows per partial sum of the "blocked" order
_CHUNK_ROWS = 1024  # rows per cumulative-sum pass of the sequential order (bounds the memory)

# The knob values this backward implements: those the conventions' contracts use. Knobs not listed
# (weight_offset, eps, cast, scope, weight_span, rope_theta) are implemented at every value.
SUPPORTED: dict[str, tuple] = {
    "eps_placement": ("inside", "clamp"),
    "eps_scale": ("one",),
    "statistic": ("mean_square", "sum_square"),
    "stats_dtype": ("float32",),
    "offset_dtype": ("float32",),
    "inverted": (False,),
    "gate_activation": ("silu",),
    "gate_order": ("norm_then_gate",),
    "rope_order": ("norm_then_rope",),
}


def check_supported(contract: Contract) -> None:
    """Raise NotImplementedError naming every knob of the contract (of those that apply to its op)
    set to a value this backward does not implement."""
    bad = [f"{name}={getattr(contract, name)!r} (implemented: {', '.join(map(repr, values))})"
           for name, values in SUPPORTED.items()
           if contract.record.applies(name) and getattr(contract, name) not in values]
    if bad:
        raise NotImplementedError(f"numpy_backward does not implement {contract.op} with "
                                  + "; ".join(bad) + ": no convention uses these values")


def backward(op: str, contract: Contract, inputs: CaseInputs, dy: np.ndarray,
             dw_order: str = "blocked") -> dict[str, np.ndarray]:
    """The gradients of the op's forward (numpy_own.run) at `inputs` for the upstream gradient `dy`
    (x's shape, in the input dtype): {"x": dx (input dtype), "weight": dw (float32, the weight's
    shape), "gate": dgate (input dtype)}, for the operands the op takes. Module docstring: how."""
    if op != contract.op:
        raise ValueError(f"backward of {op!r} asked with a contract for {contract.op!r}")
    if dw_order not in DW_ORDERS:
        raise ValueError(f"dw_order must be one of {', '.join(DW_ORDERS)}; got {dw_order!r}")
    check_supported(contract)
    a = inputs.arrays
    x = a["x"]
    dtype = x.dtype
    dy = np.asarray(dy)
    if dy.shape != x.shape:
        raise ValueError(f"dy has shape {dy.shape}, x has {x.shape}")
    num_heads = inputs.num_heads
    grad = dy.astype(_F32)
    if "positions" in a:  # the norm, then RoPE: rotate the gradient back first
        grad = rope_transpose(grad, a["positions"], num_heads, contract.rope_theta)

    xf = x.astype(_F32)
    heads = num_heads if contract.scope == "head" else 1
    spans = xf.reshape(*xf.shape[:-1], heads, -1)
    r, coef = _saved_statistic(spans, contract)
    u = (spans * r).reshape(xf.shape)  # the normalised value, float32
    llama = contract.cast == "llama" and "weight" in a
    if llama:  # the forward multiplies the weight into u rounded to the input dtype
        u = u.astype(dtype).astype(_F32)

    out: dict[str, np.ndarray] = {}
    scale = None
    if "weight" in a:
        scale = a["weight"].astype(_F32) + _F32(contract.weight_offset)
        if llama:
            scale = scale.astype(dtype).astype(_F32)
        if scale.shape[-1] != x.shape[-1]:  # a per-head weight, shared by every head
            scale = np.tile(scale, x.shape[-1] // scale.shape[-1])
    if "gate" in a:
        z = a["gate"].astype(_F32)
        s = (1.0 / (1.0 + np.exp(-z))).astype(_F32)  # as numpy_own's forward computes it
        act = z * s
        pre_gate = u if scale is None else u * scale
        if llama:  # the forward's product is in the input dtype
            pre_gate = pre_gate.astype(dtype).astype(_F32)
        out["gate"] = (grad * pre_gate * (s * (1.0 + z * (1.0 - s)))).astype(dtype)
        grad = grad * act
    if "weight" in a:
        terms = (grad * u).reshape(-1, a["weight"].shape[-1])  # one row per (row, head) sharing w
        out["weight"] = reduce_rows(terms, dw_order).reshape(a["weight"].shape)
        grad = grad * scale

    g = grad.reshape(spans.shape)
    dx = r * g - spans * (coef * _projection(g, spans))
    out["x"] = dx.reshape(x.shape).astype(dtype)
    return {name: out[name] for name in a if name in out}  # the operands' order


def _saved_statistic(spans: np.ndarray, c: Contract) -> tuple[np.ndarray, np.ndarray]:
    """(r, coef) per span, float32: r = 1 / the denominator, as the forward computes it, and the
    coefficient of the projection term, d(r)/d(stat) * d(stat)/dx / x: r^3 / n (mean_square), r^3
    (sum_square); 0 where the clamp's eps branch holds (the denominator is then a constant)."""
    n = spans.shape[-1]
    stat = (spans * spans).sum(-1, keepdims=True)
    if c.statistic == "mean_square":
        stat = stat / _F32(n)
    eps = _F32(c.eps)
    cube = lambda v: v * v * v  # noqa: E731
    with np.errstate(divide="ignore"):
        if c.eps_placement == "inside":
            r = 1.0 / np.sqrt(stat + eps)
            coef = cube(r)
        else:  # "clamp": x / max(||x||, eps)
            root = np.sqrt(stat)
            r = 1.0 / np.maximum(root, eps)
            coef = np.where(root >= eps, cube(r), _F32(0.0))
    if c.statistic == "mean_square":
        coef = coef / _F32(n)
    return r, coef


def _projection(g: np.ndarray, spans: np.ndarray) -> np.ndarray:
    """sum(g * x) over each span, float32 (np.sum over the contiguous last axis: pairwise)."""
    return (g * spans).sum(-1, keepdims=True)


def rope_transpose(g: np.ndarray, positions: np.ndarray, num_heads: int, theta: float) -> np.ndarray:
    """R^T g in float32 for the rotate_half RoPE R of the forward: per head of D, with c, s the
    float32 cos / sin of the forward's float32 angles,
        out[:D/2] = g[:D/2] * c + g[D/2:] * s,    out[D/2:] = g[D/2:] * c - g[:D/2] * s."""
    dim = g.shape[-1] // num_heads
    heads = g.reshape(-1, num_heads, dim)
    theta_angles = rope_angles(positions, dim, theta).astype(np.float64)[:, None, :]  # (tokens, 1, D/2)
    if theta_angles.shape[0] != heads.shape[0]:
        raise ValueError(f"{theta_angles.shape[0]} positions for {heads.shape[0]} rows")
    cos, sin = np.cos(theta_angles).astype(_F32), np.sin(theta_angles).astype(_F32)
    half = dim // 2
    lo, hi = heads[..., :half], heads[..., half:]
    out = np.concatenate([lo * cos + hi * sin, hi * cos - lo * sin], axis=-1)
    return out.reshape(g.shape)


def reduce_rows(terms: np.ndarray, order: str) -> np.ndarray:
    """The float32 sum over axis 0 of float32 (rows, n) `terms`, in reduction order `order`."""
    terms = np.asarray(terms, dtype=_F32)
    rows, width = terms.shape
    if order == "float64":
        return terms.astype(np.float64).sum(axis=0).astype(_F32)
    if order == "pairwise":  # along the contiguous axis, where numpy sums pairwise
        return np.ascontiguousarray(terms.T).sum(axis=-1, dtype=_F32)
    if order == "sequential":
        return _sequential(terms, np.zeros(width, dtype=_F32))
    if order == "blocked":
        blocks = -(-rows // BLOCK_ROWS)
        padded = np.zeros((blocks * BLOCK_ROWS, width), dtype=_F32)  # + 0 is exact
        padded[:rows] = terms
        partials = np.cumsum(padded.reshape(blocks, BLOCK_ROWS, width), axis=1, dtype=_F32)[:, -1]
        return _sequential(partials, np.zeros(width, dtype=_F32))
    raise ValueError(f"dw_order must be one of {', '.join(DW_ORDERS)}; got {order!r}")


def _sequential(terms: np.ndarray, acc: np.ndarray) -> np.ndarray:
    """acc + terms[0] + terms[1] + ... in float32, strictly left to right (np.cumsum is a running
    sum), chunked so that the running sums of at most _CHUNK_ROWS rows are held at once."""
    for start in range(0, terms.shape[0], _CHUNK_ROWS):
        chunk = terms[start:start + _CHUNK_ROWS].copy()
        chunk[0] += acc
        acc = np.cumsum(chunk, axis=0, dtype=_F32)[-1]
    return acc
