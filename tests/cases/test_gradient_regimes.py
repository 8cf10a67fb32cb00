"""The upstream-gradient regimes of backward cases: deterministic, shaped like y, and each doing what
it is there for (cases/regimes.py says why each exists)."""
import numpy as np
import pytest

from normdiff.cases import regimes
from normdiff.harness.data.errors import UsageError

Y = np.random.default_rng(7).standard_normal((16, 256)) * np.linspace(0.5, 2.0, 256)


def draw(name, seed=1, y=Y):
    return regimes.draw_gradient(name, np.random.default_rng(seed), y)


@pytest.mark.parametrize("name", list(regimes.GRADIENT_REGIMES))
def test_every_regime_is_deterministic_finite_and_shaped_like_y(name):
    dy = draw(name)
    assert dy.shape == Y.shape and dy.dtype == np.float64 and np.isfinite(dy).all()
    assert np.array_equal(dy, draw(name)) and not np.array_equal(dy, draw(name, seed=2))


def test_aligned_makes_the_projection_term_large():
    """sum(dy * y) per row, against the same sum for N(0, 1) gradients: the projection term's size."""
    def projection(dy):
        return np.abs(np.sum(dy * Y, axis=-1)) / (np.linalg.norm(dy, axis=-1) * np.linalg.norm(Y, axis=-1))

    assert projection(draw("aligned")).min() > 0.99
    assert projection(draw("normal")).mean() < 0.2


def test_sparse_has_about_one_percent_nonzero_and_never_an_empty_row():
    dy = draw("sparse")
    per_row = np.count_nonzero(dy, axis=-1)
    assert (per_row == 256 // 100).all()
    narrow = draw("sparse", y=np.ones((4, 8)))
    assert (np.count_nonzero(narrow, axis=-1) == 1).all()


def test_large_and_tiny_set_the_scale():
    assert 250 < np.std(draw("large")) < 350
    assert 0.8e-4 < np.std(draw("tiny")) < 1.2e-4


def test_aligned_on_a_zero_row_is_noise_not_nan():
    y = Y.copy()
    y[3] = 0.0
    dy = draw("aligned", y=y)
    assert np.isfinite(dy).all() and np.abs(dy[3]).max() < 1.0


def test_unknown_regime_lists_the_known_ones():
    with pytest.raises(UsageError, match="unknown gradient regime 'gaussian'; known: aligned, large, normal"):
        draw("gaussian")
