"""The oracle: a contract evaluated exactly (in float64) on the bits the implementations received.

The exact maths is the op's (its record's `exact`, harness/data/ops/; the norms share ops/norm.py);
this module is what the engine asks of it: every forward result of a call (`results`), and the
quantities the judge and the budgets need around the exact value: a centring op's conditioning and
the floor its errors are counted at (budgets.py, "Centring"). Follows seed 004: r = sqrt(mean(x^2)
+ eps), y = x / r * g; and its Jacobian dy_i/dx_j = g_i (delta_ij / r - x_i x_j / (n r^3)), which
`rms_norm_jacobian` evaluates.
"""
from __future__ import annotations

import numpy as np

from normdiff.harness.data import budgets
from normdiff.harness.data.contracts import Contract
from normdiff.harness.data.ops.norm import (ACTIVATIONS, centred, denominator, eps_factor, mean_slip,  # noqa: F401
                                            normalise, residual_sum, rotate, statistic, tiled)

def evaluate(contract: Contract, arrays: dict[str, np.ndarray], num_heads: int = 1, power="nearest") -> np.ndarray:
    """The contract's exact output y, float64, shaped like x (a fused add's first result): its op
    record's exact forward (harness/data/ops/). `power` (RoPE): "other" rotates by the angles of the
    other float32 neighbour of each frequency's power, the contract as a faithfully rounded pow may
    give it (rope.inverse_frequencies)."""
    return contract.record.exact(contract, arrays, num_heads, power)


def results(contract: Contract, arrays: dict[str, np.ndarray], num_heads: int = 1) -> dict[str, np.ndarray]:
    """Every result of the op's forward, exact, float64, by name (its record's `results`): y, and a
    fused add's residual_out (h = x + residual, exact)."""
    if contract.record.exact_results is not None:  # a quantizing op's q and scale (and the exact y)
        return contract.record.exact_results(contract, arrays, num_heads)
    out = {"y": evaluate(contract, arrays, num_heads)}
    if "residual_out" in contract.record.results:
        out["residual_out"] = residual_sum(arrays)
    return out


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
