"""RoPE's float32 frequencies and angles, as HF's Qwen3RotaryEmbedding makes them: one function,
shared by the oracle and the own NumPy and JAX implementations.

The angles are part of the qk_norm_rope contract, and they are float32. Exact float64 angles would
be a different contract: below position 8192 the float32 angle is off the exact one by up to 4.9e-4
rad (inv_freq's own float32 rounding times the position, plus the product's rounding), which puts
an implementation that uses float64 angles ~7000 float32 ulp from one that follows HF (measured;
2.4 ulp in bf16/fp16, where it hides under rounding). So the contract is "angles computed in
float32 as HF does":
  e     = float32(float32(2i) / float32(D))
  inv_i = float32(1 / float32(float32(rope_theta) ** e))     (the power correctly rounded)
  a     = float32(float32(position) * inv_i)                  (positions: integers < 2^24)
and cos / sin of those float32 angles are then exact (the oracle takes them in float64).
HF's power is torch's float32 `pow`, which is not correctly rounded: on this machine (torch 2.13,
AVX512) it is one float32 ulp off at one frequency of 64 for D = 128, theta = 1e6 (index 37,
inv 3.398e-4), which moves an angle by at most ~2.4e-7 rad at position 8191 (measured: torch's and
HF's worst float32 error is 5.1 ulp, 4.0 with the correctly rounded frequencies). At other head dims
it is off at a larger frequency (D = 42: index 6, inv 0.019, 40 float32 ulp at position ~1240), and
no fixed budget holds that (position x ulp(inv_i) reaches ~8000 ulp), so the judge takes each
frequency's pairs at the nearer of the power's two float32 neighbours (`inverse_frequencies`'
power="other"; engine/judge.py, Reference.nearest): torch's pow returns one of them at every even
D <= 256 (tests/harness/data/test_rope.py). The own PyTorch implementation keeps torch's pow on
purpose, as HF does (torch_own.py).

Imports only NumPy: `normdiff repro --script` inlines this file's source next to numpy_own's.
"""
from __future__ import annotations

import numpy as np

MAX_EXACT_POSITION = 2**24  # float32 holds every integer below this exactly


POWERS = ("nearest", "other")  # which float32 neighbour of the exact power (`inverse_frequencies`)


def inverse_frequencies(head_dim: int, theta: float, power="nearest") -> np.ndarray:
    """float32 1 / theta ** (arange(0, D, 2) / D), float32 at every step, the power correctly
    rounded to float32 (computed in float64). power="other": the power rounded to its other float32
    neighbour instead, the one a faithfully rounded pow (within 1 ulp, as torch's) may return where
    the exact power lies near a midpoint (`Reference` in engine/judge.py judges each frequency's
    pairs against the nearer of the two; theta ** 0 = 1 is exact in any pow, so it has no other).
    power may also be a boolean array of D/2, one choice per frequency (True: the other neighbour):
    the frequencies one implementation's pow returned, when the judge has found them (a backward
    mixes every frequency's terms, so its exact value needs the whole choice at once)."""
    if head_dim % 2:
        raise ValueError(f"RoPE needs an even head_dim, got {head_dim}")
    if not isinstance(power, str):
        choice = np.asarray(power, dtype=bool)
        if choice.shape != (head_dim // 2,):
            raise ValueError(f"a per-frequency power choice needs {head_dim // 2} entries, got {choice.shape}")
        return np.where(choice, inverse_frequencies(head_dim, theta, "other"),
                        inverse_frequencies(head_dim, theta, "nearest"))
    if power not in POWERS:
        raise ValueError(f"power={power!r} is not one of {POWERS}")
    f32 = np.float32
    exponent = np.arange(0, head_dim, 2, dtype=f32) / f32(head_dim)
    exact = np.float64(f32(theta)) ** exponent.astype(np.float64)
    rounded = exact.astype(f32)
    if power == "other":
        toward = np.where(rounded.astype(np.float64) < exact, f32(np.inf), f32(0.0))
        rounded = np.where(exponent == 0, rounded, np.nextafter(rounded, toward))
    return f32(1.0) / rounded


def angles(positions, head_dim: int, theta: float, power="nearest") -> np.ndarray:
    """float32 angles (tokens, D/2): float32(position) * inv_freq rounded to float32
    (`position_ids.float() * inv_freq`, one rounding; `power`: `inverse_frequencies`')."""
    positions = np.asarray(positions).reshape(-1)
    if positions.dtype.kind not in "iu" and not np.array_equal(positions, np.round(positions)):
        raise ValueError("RoPE positions must be integers")
    if positions.size and np.abs(positions).max() >= MAX_EXACT_POSITION:
        raise ValueError("RoPE positions must be below 2^24 (exact in float32)")
    return positions.astype(np.float32)[:, None] * inverse_frequencies(head_dim, theta, power)[None, :]
