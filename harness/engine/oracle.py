"""The oracle: a contract evaluated exactly (in float64) on the bits the implementations received.

Rounding knobs (`cast`, `stats_dtype`, `offset_dtype`, `variance_form`) describe how a *low-precision*
implementation rounds; the oracle ignores them on purpose and computes the exact maths, so that
every implementation's error is its distance from the true value of its contract. The ULP budgets
in `budgets.py` are what absorb legitimate rounding orders.

Follows seed 004: r = sqrt(mean(x^2) + eps), y_i = x_i / r * g_i; and its Jacobian
dy_i/dx_j = g_i (delta_ij / r - x_i x_j / (n r^3)), which `rms_norm_jacobian` evaluates.

qk_norm_rope (seed 004, section 3.5: per-head QK-Norm, then RoPE): one exception to "exact". The RoPE
angles are float32 by contract, as HF computes them (harness/data/rope.py explains why and computes
them); cos, sin and everything after them are float64.

The oracle reads the contract's knobs and which operands it is given (a weight, a gate, positions),
so an op the knobs can express needs nothing new here.
"""
from __future__ import annotations

import numpy as np

from normdiff.harness.data import budgets, rope
from normdiff.harness.data.contracts import Contract

ACTIVATIONS = {
    "silu": lambda z: z / (1.0 + np.exp(-z)),
    "sigmoid": lambda z: 1.0 / (1.0 + np.exp(-z)),
}


def statistic(xs: np.ndarray, kind: str, correction: int = 0) -> np.ndarray:
    if kind == "mean_square":
        return np.mean(xs * xs, axis=-1, keepdims=True)
    if kind == "sum_square":
        return np.sum(xs * xs, axis=-1, keepdims=True)
    c = centred(xs)  # "variance": LayerNorm's statistic, over n - correction
    with np.errstate(divide="ignore", invalid="ignore"):  # n = 1 unbiased: 0/0, as torch.var gives
        return np.sum(c * c, axis=-1, keepdims=True) / (xs.shape[-1] - correction)


def centred(xs: np.ndarray) -> np.ndarray:
    return xs - xs.mean(axis=-1, keepdims=True)


def denominator(stat: np.ndarray, contract: Contract, xs: np.ndarray) -> np.ndarray:
    eps = contract.eps * eps_factor(xs, contract.eps_scale)
    if contract.eps_placement == "inside":
        return np.sqrt(stat + eps)
    if contract.eps_placement == "outside":
        return np.sqrt(stat) + eps
    if contract.eps_placement == "clamp":
        return np.maximum(np.sqrt(stat), eps)
    return np.sqrt(stat)  # "none": 0/0 is NaN, as the buggy code gives


def eps_factor(xs: np.ndarray, scale: str):
    if scale == "span":
        return xs.shape[-1]
    if scale == "max_square":
        return np.max(xs * xs, axis=-1, keepdims=True)
    return 1.0


def normalise(xs: np.ndarray, contract: Contract) -> np.ndarray:
    d = denominator(statistic(xs, contract.statistic, contract.correction), contract, xs)
    if contract.centre:  # LayerNorm: the centred x over the (variance's) denominator
        xs = centred(xs)
    with np.errstate(divide="ignore", invalid="ignore"):
        return xs * d if contract.inverted else xs / d


def rotate(x: np.ndarray, positions: np.ndarray, num_heads: int, theta: float, power="nearest") -> np.ndarray:
    """RoPE in rotate_half form on (..., H * D) float64 x, one position per token (row): x * cos + rotate_half(x) * sin with
    cos / sin of the float32 angles taken in float64, the same rotation for every head (`power`:
    which float32 neighbour of each frequency's power, rope.inverse_frequencies)."""
    tokens, dim = int(np.prod(x.shape[:-1])), x.shape[-1] // num_heads
    angles = rope.angles(positions, dim, theta, power).astype(np.float64)
    if angles.shape[0] != tokens:
        raise ValueError(f"{angles.shape[0]} positions for {tokens} tokens")
    emb = np.concatenate([angles, angles], axis=-1)[:, None, :]  # (tokens, 1 head, D)
    heads = x.reshape(-1, num_heads, dim)
    half = dim // 2
    rotated_half = np.concatenate([-heads[..., half:], heads[..., :half]], axis=-1)
    return (heads * np.cos(emb) + rotated_half * np.sin(emb)).reshape(x.shape)


def results(contract: Contract, arrays: dict[str, np.ndarray], num_heads: int = 1) -> dict[str, np.ndarray]:
    """Every result of the op's forward, exact, float64, by name (its record's `results`): y, and a
    fused add's residual_out (h = x + residual, exact)."""
    out = {"y": evaluate(contract, arrays, num_heads)}
    if "residual_out" in contract.record.results:
        out["residual_out"] = residual_sum(arrays)
    return out


def residual_sum(arrays: dict[str, np.ndarray]) -> np.ndarray:
    return np.asarray(arrays["x"], dtype=np.float64) + np.asarray(arrays["residual"], dtype=np.float64)


def evaluate(contract: Contract, arrays: dict[str, np.ndarray], num_heads: int = 1, power="nearest") -> np.ndarray:
    """The contract's exact output y, float64, shaped like x (a fused add's first result). `power`
    (RoPE): "other" rotates by the angles of the other float32 neighbour of each frequency's power,
    the contract as a faithfully rounded pow may give it (rope.inverse_frequencies)."""
    if "residual" in arrays:  # add_rms_norm: the norm of h = x + residual, or (a bug) norm(x) + residual
        rest = {name: a for name, a in arrays.items() if name not in ("x", "residual")}
        h = residual_sum(arrays)
        if contract.residual_order == "after_norm":
            return evaluate(contract, {"x": arrays["x"], **rest}, num_heads, power) + np.asarray(arrays["residual"], np.float64)
        return evaluate(contract, {"x": h, **rest}, num_heads, power)
    x = np.asarray(arrays["x"], dtype=np.float64)
    rotates = "positions" in arrays
    if rotates and x.shape[-1] % num_heads:
        raise ValueError(f"width {x.shape[-1]} is not divisible by num_heads={num_heads}")
    if rotates and contract.rope_order == "rope_then_norm":
        x = rotate(x, arrays["positions"], num_heads, contract.rope_theta, power)
    act = ACTIVATIONS[contract.gate_activation]
    gate = np.asarray(arrays["gate"], dtype=np.float64) if "gate" in arrays else None
    if gate is not None and contract.gate_order == "gate_then_norm":
        x = x * act(gate)
    lead, width = x.shape[:-1], x.shape[-1]
    heads = num_heads if contract.scope == "head" else 1
    if width % heads:
        raise ValueError(f"width {width} is not divisible by num_heads={num_heads}")
    y = normalise(x.reshape(*lead, heads, width // heads), contract).reshape(x.shape)
    if "weight" in arrays:
        w = tiled(arrays["weight"], width)
        scale = contract.weight_offset + w
        if "bias" in arrays and contract.bias_order == "before_scale":
            y = (y + tiled(arrays["bias"], width)) * scale
        else:
            y = y * scale
    if "bias" in arrays and (contract.bias_order == "after_scale" or "weight" not in arrays):
        y = y + tiled(arrays["bias"], width)
    if gate is not None and contract.gate_order == "norm_then_gate":
        y = y * act(gate)
    if rotates and contract.rope_order == "norm_then_rope":
        y = rotate(y, arrays["positions"], num_heads, contract.rope_theta, power)
    return y


def tiled(v: np.ndarray, width: int) -> np.ndarray:
    """A per-case operand (weight, bias) as float64 across the row: a per-head one is shared by
    every head, so tiled."""
    v = np.asarray(v, dtype=np.float64)
    if v.shape[-1] == width:
        return v
    if width % v.shape[-1]:
        raise ValueError(f"a weight of {v.shape[-1]} does not tile a width of {width}")
    return np.tile(v, width // v.shape[-1])


def rms_norm_jacobian(x: np.ndarray, gamma: np.ndarray, eps: float) -> np.ndarray:
    """dy/dx of y = x / sqrt(mean(x^2) + eps) * gamma for one vector x (seed 004, section 3.4)."""
    x = np.asarray(x, dtype=np.float64)
    n = x.size
    r = np.sqrt(np.mean(x * x) + eps)
    return np.asarray(gamma, dtype=np.float64)[:, None] * (np.eye(n) / r - np.outer(x, x) / (n * r**3))


def centring_condition(contract: Contract, arrays: dict[str, np.ndarray], num_heads: int = 1) -> float:
    """kappa, the worst span's: how ill-conditioned centring is where the judge counts its errors.
    A float32 mean errs by up to g_n mean|x| (budgets.centring_gamma), x - mean carries that error
    into every element, divided by sqrt(var + eps), and the judge counts it at the span's scale
    (`span_scale`, max(rms(u), the error itself)); so kappa = mean|x| / (sqrt(var + eps) x that
    scale) = min(mean|x| / sqrt(var), 1 / g_n), rms(u) being sqrt(var / (var + eps)). Dividing by
    sqrt(var + eps) alone (the first version) undercounts it by 1 / rms(u) where eps dominates the
    variance (budgets.py, "Centring"). 0 for an op that does not centre."""
    if not contract.centre:
        return 0.0
    xs = _spans(arrays["x"], contract, num_heads)
    error = mean_error(xs, contract)
    with np.errstate(divide="ignore", invalid="ignore"):
        kappa = error / budgets.centring_gamma(xs.shape[-1]) / span_scale(xs, contract)
    kappa = kappa[np.isfinite(kappa)]
    return float(kappa.max()) if kappa.size else 0.0


def _spans(x: np.ndarray, contract: Contract, num_heads: int) -> np.ndarray:
    """x, float64, as (..., spans, n): the spans a centring op centres over."""
    x = np.asarray(x, dtype=np.float64)
    heads = num_heads if contract.scope == "head" else 1
    return x.reshape(*x.shape[:-1], heads, -1)


def mean_slip(xs: np.ndarray) -> np.ndarray:
    """Per span, how far a legal float32 mean may be off: g_n mean|x| (budgets.centring_gamma)."""
    return budgets.centring_gamma(xs.shape[-1]) * np.mean(np.abs(xs), axis=-1, keepdims=True)


def mean_error(xs: np.ndarray, contract: Contract) -> np.ndarray:
    """Per span, the most a legal float32 mean's error moves the normalised value, absolute:
    g_n mean|x| / sqrt(var + eps) (`mean_slip`)."""
    spread = np.sqrt(statistic(xs, "variance") + contract.eps)
    with np.errstate(divide="ignore", invalid="ignore"):
        return mean_slip(xs) / spread


def span_scale(xs: np.ndarray, contract: Contract) -> np.ndarray:
    """Per span, the scale of the normalised value at which its errors are counted: rms(u), but no
    less than what a legal mean's error moves u by (`mean_error`). On a constant span u = 0 and
    rms(u) = 0, while a correct float32 mean still leaves u ~ g_n mean|x| / sqrt(eps): counted at
    rms(u) alone any such error is infinitely many ULPs; at this scale it is at most 1 / u_dtype,
    and "mean not subtracted" (u = mean / sqrt(eps), 1 / g_n times more) stays far outside."""
    u = normalise(xs, contract)
    with np.errstate(invalid="ignore"):
        rms = np.sqrt(np.mean(u * u, axis=-1, keepdims=True))
    return np.maximum(_finite(rms), _finite(mean_error(xs, contract)))


def _finite(a: np.ndarray) -> np.ndarray:
    """a, with what is not finite (a span with no scale: 0 / 0) as 0: no floor there."""
    return np.where(np.isfinite(a), a, 0.0)


def centred_floor(contract: Contract, arrays: dict[str, np.ndarray], num_heads: int = 1) -> np.ndarray | None:
    """The least magnitude, per element, at which a centring op's errors are counted (None for the
    other ops): s |offset + w| + |b|, s the span's scale of the normalised value (`span_scale`:
    rms(u), or the error a legal mean leaves where that is larger). The float32 mean's error is one
    value for the whole span, so it lands in every element alike, relative to the span's scale
    rather than to |y|, which is ~0 wherever x is near the mean; and y = u w + b can cancel to far
    below |u w|, which a float32 u w errs relative to (budgets.py, "Centring")."""
    if not contract.centre:
        return None
    x = np.asarray(arrays["x"], dtype=np.float64)
    width = x.shape[-1]
    xs = _spans(x, contract, num_heads)
    floor = (span_scale(xs, contract) * np.ones(xs.shape)).reshape(x.shape)
    scale = np.abs(contract.weight_offset + tiled(arrays["weight"], width)) if "weight" in arrays else 1.0
    if "bias" in arrays:
        b = np.abs(tiled(arrays["bias"], width))
        floor = (floor + b) * scale if contract.bias_order == "before_scale" else floor * scale + b
    else:
        floor = floor * scale
    return floor
