"""JAX (with flax on top): jax arrays convert to NumPy with their dtype, bfloat16 included
(jax uses ml_dtypes' bfloat16)."""
from __future__ import annotations

from normdiff.implementations.frameworks.record import Framework


def from_numpy(array):
    import jax.numpy as jnp

    return jnp.asarray(array)


FRAMEWORK = Framework("jax", modules=("jax", "jaxlib"), extra="jax", distributions=("jax", "jaxlib"),
                      libraries={"flax": "flax"}, user_code=True, detect=("jax", "flax"),
                      array_types=("jax",), from_numpy=from_numpy)
