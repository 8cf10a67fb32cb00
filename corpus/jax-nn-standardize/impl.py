"""jax.nn.standardize (jax 0.10.2, jax/_src/nn/functions.py lines 649-711), called as it is:
standardize(x, axis=-1, mean=None, variance=None, epsilon=1e-5, where=None, *, algorithm="fast"). A
weightless LayerNorm computed in the input dtype; its default variance algorithm is the one-pass
mean(x^2) - mean(x)^2, clipped at zero (the docstring warns of catastrophic cancellation; "stable" is
the two-pass form)."""
from jax.nn import standardize  # noqa: F401
