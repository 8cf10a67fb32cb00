"""A model of MaxText's RMSNorm at e591f30 (AI-Hypercomputer/maxtext src/maxtext/layers/normalizations.py,
lines 34-95), a flax.nnx module, written here from reading it (sharding and host-offload options left
out: they place arrays, they do not change the arithmetic). RMSNorm(num_features, epsilon=1e-6,
dtype=float32, weight_dtype=float32, ..., scale_init=ones, scale_offset=0.0, with_scale=True, *, rngs):
the input is converted to float32, the mean of its squares taken, the input scaled by rsqrt(mean +
epsilon) and converted to `dtype`; the `scale` parameter is converted to `dtype`, scale_offset added,
and the two multiplied (an einsum over the feature axis)."""
import jax.numpy as jnp
from flax import nnx
from jax import lax


class RMSNorm(nnx.Module):
    def __init__(self, num_features: int, epsilon: float = 1e-6, dtype=jnp.float32, weight_dtype=jnp.float32,
                 scale_init=nnx.initializers.ones, scale_offset: float = 0.0, with_scale: bool = True, *,
                 rngs: nnx.Rngs):
        self.num_features = num_features
        self.epsilon = epsilon
        self.dtype = dtype
        self.scale_offset = scale_offset
        self.with_scale = with_scale
        self.scale = nnx.Param(scale_init(rngs.params(), (num_features,), weight_dtype)) if with_scale else None

    def __call__(self, x):
        x = jnp.asarray(x, jnp.float32)
        mean2 = jnp.mean(lax.square(x), axis=-1, keepdims=True)
        y = jnp.asarray(x * lax.rsqrt(mean2 + self.epsilon), self.dtype)  # float32 by default
        if not self.with_scale:
            return y
        scale = jnp.asarray(self.scale.value, self.dtype) + self.scale_offset
        return jnp.einsum("...k,k->...k", y, scale)
