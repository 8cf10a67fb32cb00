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
