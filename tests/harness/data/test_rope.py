"""RoPE's float32 angles, as the contract defines them (harness/data/rope.py)."""
import numpy as np
import pytest

from normdiff.harness.data import rope


def test_rope_angles_emulate_hf_float32():
    # float32(position) * float32(inv_freq), rounded once to float32; inv_freq[0] = 1 exactly
    angles = rope.angles(np.array([0, 1, 8191]), 128, 1e6)
    assert angles.dtype == np.float32 and angles.shape == (3, 64)
    inv = rope.inverse_frequencies(128, 1e6)
    assert inv[0] == 1.0 and angles[2, 0] == 8191.0
    np.testing.assert_array_equal(angles[2], np.float32(8191) * inv)
    # two float32 roundings (the power, then its reciprocal): within 1.5 float32 ulp of the exact
    # 1 / theta ** (2i / D), not necessarily the nearest float32
    exact = 1.0 / 1e6 ** (np.arange(0, 128, 2) / 128)
    assert np.all(np.abs(inv - exact) <= 1.5 * np.spacing(inv).astype(np.float64))
    # the float32 angle at position 8191 is far from the exact one: why the contract fixes it
    assert np.abs(angles[2].astype(np.float64) - 8191 * exact).max() > 1e-4
    with pytest.raises(ValueError, match="below 2\\^24"):
        rope.angles(np.array([2**24]), 8, 1e4)


def test_rope_needs_an_even_head_dim():
    with pytest.raises(ValueError, match="even head_dim"):
        rope.inverse_frequencies(7, 1e4)


@pytest.mark.parametrize("head_dim, theta", [(42, 1e6), (62, 1e6), (128, 1e6), (64, 1e4)])
def test_the_other_power_is_the_other_float32_neighbour_of_the_exact_one(head_dim, theta):
    f32 = np.float32
    exponent = (np.arange(0, head_dim, 2, dtype=f32) / f32(head_dim)).astype(np.float64)
    exact = np.float64(f32(theta)) ** exponent
    nearest, other = (1 / rope.inverse_frequencies(head_dim, theta, p).astype(np.float64) for p in rope.POWERS)
    # 1 / inv gives each power back within a float32 ulp: they straddle the exact power
    lo, hi = np.minimum(nearest, other), np.maximum(nearest, other)
    assert other[0] == nearest[0] == 1.0  # theta ** 0 is exact in any pow
    assert (lo[1:] <= exact[1:] * (1 + 2**-23)).all() and (hi[1:] >= exact[1:] * (1 - 2**-23)).all()
    # (the two reciprocals may round to one float32 inverse: then that frequency has one choice)
    with pytest.raises(ValueError, match="power="):
        rope.inverse_frequencies(head_dim, theta, "torch")


def test_torch_pow_returns_one_of_the_two_neighbours():
    # the contract's faithful-pow premise (engine/judge.py, Reference.nearest), on this torch
    torch = pytest.importorskip("torch")
    for head_dim in range(2, 258, 2):
        pw = (1.0 / (1e6 ** (torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim))).numpy()
        nearest, other = (rope.inverse_frequencies(head_dim, 1e6, p) for p in rope.POWERS)
        assert ((pw == nearest) | (pw == other)).all(), head_dim
