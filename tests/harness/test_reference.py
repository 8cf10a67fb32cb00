"""The oracle against hand-computed values and the seed's maths."""
import numpy as np
import pytest

from normdiff.harness import reference
from normdiff.harness.contracts import Contract, get_contract


def test_seed_worked_example():
    # seed 004, section 3.3: x = (3, 4): RMS 3.5355, y = (0.8485, 1.1314), mean(y^2) = 1
    y = reference.evaluate(Contract("rms_norm", eps=0.0), {"x": np.array([[3.0, 4.0]]), "weight": np.ones(2)})
    np.testing.assert_allclose(y, [[0.848528137, 1.131370850]], rtol=1e-9)
    assert np.mean(y**2) == pytest.approx(1.0)


def test_eps_sits_inside_the_square_root():
    x = np.array([[1e-3, -2e-3, 3e-3]])
    ms = np.mean(x**2)
    y = reference.evaluate(Contract("rms_norm", eps=1e-6), {"x": x, "weight": np.ones(3)})
    np.testing.assert_allclose(y, x / np.sqrt(ms + 1e-6), rtol=1e-12)
    outside = reference.evaluate(Contract("rms_norm", eps=1e-6, eps_placement="outside"), {"x": x, "weight": np.ones(3)})
    np.testing.assert_allclose(outside, x / (np.sqrt(ms) + 1e-6), rtol=1e-12)
    assert not np.allclose(y, outside, rtol=1e-2)


def test_zero_centred_weight_multiplies_one_plus_w():
    x, w = np.array([[1.0, -1.0]]), np.array([0.5, -0.25])
    plain = reference.evaluate(get_contract("rms_norm", "qwen3"), {"x": x, "weight": w})
    centred = reference.evaluate(get_contract("rms_norm", "qwen3.5"), {"x": x, "weight": w})
    np.testing.assert_allclose(plain, x / np.sqrt(1 + 1e-6) * w)
    np.testing.assert_allclose(centred, x / np.sqrt(1 + 1e-6) * (1 + w))


def test_per_head_and_full_vector_scopes():
    head_a, head_b = np.array([3.0, 4.0]), np.array([30.0, 40.0])
    x = np.concatenate([head_a, head_b])[None]
    per_head = reference.evaluate(get_contract("qk_norm", "qwen3").replace(eps=0.0), {"x": x, "weight": np.ones(2)}, num_heads=2)
    np.testing.assert_allclose(per_head, [[0.8485281, 1.1313708, 0.8485281, 1.1313708]], rtol=1e-6)
    full = reference.evaluate(get_contract("qk_norm", "olmo2").replace(eps=0.0), {"x": x, "weight": np.ones(4)}, num_heads=2)
    np.testing.assert_allclose(full, x / np.sqrt(np.mean(x**2)), rtol=1e-12)


def test_gated_norm_orders_and_activations():
    rng = np.random.default_rng(0)
    x, z, w = rng.standard_normal((2, 8)), rng.standard_normal((2, 8)), rng.standard_normal(8)
    silu = z / (1 + np.exp(-z))
    c = get_contract("gated_rms_norm", "qwen3.5")
    y = reference.evaluate(c, {"x": x, "gate": z, "weight": w})
    normed = x / np.sqrt(np.mean(x**2, -1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(y, normed * w * silu, rtol=1e-12)
    g = x * silu
    y2 = reference.evaluate(c.replace(gate_order="gate_then_norm"), {"x": x, "gate": z, "weight": w})
    np.testing.assert_allclose(y2, g / np.sqrt(np.mean(g**2, -1, keepdims=True) + 1e-6) * w, rtol=1e-12)


def test_l2_norm_and_its_zero_row():
    x = np.array([[3.0, 4.0], [0.0, 0.0]])
    y = reference.evaluate(get_contract("l2_norm", "qwen3.5"), {"x": x})
    np.testing.assert_allclose(y[0], np.array([3.0, 4.0]) / np.sqrt(25 + 1e-6))
    assert np.all(y[1] == 0)
    clamp = reference.evaluate(get_contract("l2_norm", "qwen3.5").replace(eps_placement="clamp", eps=1e-12), {"x": x})
    np.testing.assert_allclose(clamp[0], [0.6, 0.8])
    ignored = reference.evaluate(get_contract("l2_norm", "qwen3.5").replace(eps_placement="none"), {"x": x})
    assert np.isnan(ignored[1]).all()


def test_jacobian_matches_finite_differences():
    rng = np.random.default_rng(1)
    x, g, eps = rng.standard_normal(6), rng.standard_normal(6), 1e-6
    f = lambda v: reference.evaluate(Contract("rms_norm", eps=eps), {"x": v[None], "weight": g})[0]
    h = 1e-6
    numeric = np.stack([(f(x + h * e) - f(x - h * e)) / (2 * h) for e in np.eye(6)], axis=1)
    np.testing.assert_allclose(reference.rms_norm_jacobian(x, g, eps), numeric, atol=1e-8)


def test_variance_statistic_removes_the_mean():
    x = np.array([[1.0, 2.0, 3.0]])
    y = reference.evaluate(Contract("rms_norm", eps=0.0, statistic="variance"), {"x": x, "weight": np.ones(3)})
    np.testing.assert_allclose(y, x / np.std(x))
