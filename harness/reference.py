"""The oracle: a contract evaluated exactly (in float64) on the bits the implementations received.

Rounding knobs (`cast`, `stats_dtype`, `offset_dtype`) describe how a *low-precision*
implementation rounds; the oracle ignores them on purpose and computes the exact maths, so that
every implementation's error is its distance from the true value of its contract. The ULP budgets
in `budgets.py` are what absorb legitimate rounding orders.

Follows seed 004: r = sqrt(mean(x^2) + eps), y_i = x_i / r * g_i; and its Jacobian
dy_i/dx_j = g_i (delta_ij / r - x_i x_j / (n r^3)), which `rms_norm_jacobian` evaluates.

qk_norm_rope (seed 004, section 3.5: per-head QK-Norm, then RoPE): one exception to "exact". The RoPE
angles are float32 by contract, as HF computes them (contracts.Contract explains why), so
`rope_angles` emulates HF's float32 roundings of the frequencies and of position * frequency in
NumPy float32; cos, sin and everything after them are float64.
"""
from __future__ import annotations

import numpy as np

from normdiff.harness.contracts import Contract

_ACTIVATIONS = {
    "silu": lambda z: z / (1.0 + np.exp(-z)),
    "sigmoid": lambda z: 1.0 / (1.0 + np.exp(-z)),
}


def _statistic(xs: np.ndarray, kind: str) -> np.ndarray:
    if kind == "mean_square":
        return np.mean(xs * xs, axis=-1, keepdims=True)
    if kind == "sum_square":
        return np.sum(xs * xs, axis=-1, keepdims=True)
    centred = xs - xs.mean(axis=-1, keepdims=True)  # "variance": LayerNorm's statistic
    return np.mean(centred * centred, axis=-1, keepdims=True)


def _denominator(stat: np.ndarray, contract: Contract) -> np.ndarray:
    eps = contract.eps
    if contract.eps_placement == "inside":
        return np.sqrt(stat + eps)
    if contract.eps_placement == "outside":
        return np.sqrt(stat) + eps
    if contract.eps_placement == "clamp":
        return np.maximum(np.sqrt(stat), eps)
    return np.sqrt(stat)  # "none": 0/0 is NaN, as the buggy code gives


def _normalise(xs: np.ndarray, contract: Contract) -> np.ndarray:
    denominator = _denominator(_statistic(xs, contract.statistic), contract)
    with np.errstate(divide="ignore", invalid="ignore"):
        return xs * denominator if contract.inverted else xs / denominator


def rope_inverse_frequencies(head_dim: int, theta: float) -> np.ndarray:
    """HF's inv_freq = 1 / theta ** (arange(0, D, 2) / D), float32 at every step, with the float32
    power correctly rounded (computed in float64; torch's float32 pow is not, see contracts.py)."""
    if head_dim % 2:
        raise ValueError(f"RoPE needs an even head_dim, got {head_dim}")
    f32 = np.float32
    exponent = np.arange(0, head_dim, 2, dtype=f32) / f32(head_dim)
    power = (np.float64(f32(theta)) ** exponent.astype(np.float64)).astype(f32)
    return f32(1.0) / power


def rope_angles(positions: np.ndarray, head_dim: int, theta: float) -> np.ndarray:
    """float32 angles (tokens, D/2): float32(position) * inv_freq rounded to float32, as HF's
    Qwen3RotaryEmbedding computes them (`position_ids.float() * inv_freq`)."""
    positions = np.asarray(positions)
    if positions.dtype.kind not in "iu" and not np.array_equal(positions, np.round(positions)):
        raise ValueError("RoPE positions must be integers")
    if positions.size and np.abs(positions).max() >= 2**24:
        raise ValueError("RoPE positions must be below 2^24 (exact in float32)")
    p = positions.astype(np.float32).reshape(-1, 1)
    return p * rope_inverse_frequencies(head_dim, theta)[None, :]  # float32 * float32: one rounding


def rotate(x: np.ndarray, positions: np.ndarray, num_heads: int, theta: float) -> np.ndarray:
    """RoPE in rotate_half form on (..., H * D) float64 x, one position per token (row): x * cos + rotate_half(x) * sin with
    cos / sin of the float32 angles taken in float64, the same rotation for every head."""
    tokens, dim = int(np.prod(x.shape[:-1])), x.shape[-1] // num_heads
    angles = rope_angles(positions, dim, theta).astype(np.float64)
    if angles.shape[0] != tokens:
        raise ValueError(f"{angles.shape[0]} positions for {tokens} tokens")
    emb = np.concatenate([angles, angles], axis=-1)[:, None, :]  # (tokens, 1 head, D)
    heads = x.reshape(-1, num_heads, dim)
    half = dim // 2
    rotated_half = np.concatenate([-heads[..., half:], heads[..., :half]], axis=-1)
    return (heads * np.cos(emb) + rotated_half * np.sin(emb)).reshape(x.shape)


def evaluate(contract: Contract, arrays: dict[str, np.ndarray], num_heads: int = 1) -> np.ndarray:
    """The contract's exact output, float64, shaped like x."""
    x = np.asarray(arrays["x"], dtype=np.float64)
    spec = contract.spec
    rope = contract.op == "qk_norm_rope"
    if rope and x.shape[-1] % num_heads:
        raise ValueError(f"width {x.shape[-1]} is not divisible by num_heads={num_heads}")
    if rope and contract.rope_order == "rope_then_norm":
        x = rotate(x, arrays["positions"], num_heads, contract.rope_theta)
    act = _ACTIVATIONS[contract.gate_activation]
    gate = np.asarray(arrays["gate"], dtype=np.float64) if spec.has_gate else None
    if spec.has_gate and contract.gate_order == "gate_then_norm":
        x = x * act(gate)
    lead, width = x.shape[:-1], x.shape[-1]
    heads = num_heads if contract.scope == "head" else 1
    if width % heads:
        raise ValueError(f"width {width} is not divisible by num_heads={num_heads}")
    y = _normalise(x.reshape(*lead, heads, width // heads), contract).reshape(x.shape)
    if spec.has_weight:
        w = np.asarray(arrays["weight"], dtype=np.float64)
        if w.shape[-1] != width:  # a per-head weight is shared by every head
            w = np.tile(w, width // w.shape[-1])
        y = y * (contract.weight_offset + w)
    if spec.has_gate and contract.gate_order == "norm_then_gate":
        y = y * act(gate)
    if rope and contract.rope_order == "norm_then_rope":
        y = rotate(y, arrays["positions"], num_heads, contract.rope_theta)
    return y


def rms_norm_jacobian(x: np.ndarray, gamma: np.ndarray, eps: float) -> np.ndarray:
    """dy/dx of y = x / sqrt(mean(x^2) + eps) * gamma for one vector x (seed 004, section 3.4)."""
    x = np.asarray(x, dtype=np.float64)
    n = x.size
    r = np.sqrt(np.mean(x * x) + eps)
    return np.asarray(gamma, dtype=np.float64)[:, None] * (np.eye(n) / r - np.outer(x, x) / (n * r**3))
