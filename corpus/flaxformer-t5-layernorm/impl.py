"""A model of flaxformer's T5LayerNorm at 399ea3a (google/flaxformer flaxformer/components/layer_norm.py,
lines 30-102), a flax.linen module, written here from reading it (the optional convolution, the
parameter-remapping mixin and the axis-name bookkeeping left out; center_scale_at_zero False, its
default). Fields: epsilon=1e-6, dtype=float32 (the computation dtype T5X sets to the activation dtype),
scale_init=ones, use_scale=True. The input is converted to float32, the mean of squares taken, the input
scaled by rsqrt(mean + epsilon) and converted to `dtype`; the float32 `scale` parameter is converted to
`dtype` and multiplied in: with dtype = the activation dtype, Llama's cast."""
from typing import Any

import flax.linen as nn
import jax.numpy as jnp
from jax import lax


class T5LayerNorm(nn.Module):
    epsilon: float = 1e-6
    dtype: Any = jnp.float32
    scale_init: Any = nn.initializers.ones
    use_scale: bool = True

    @nn.compact
    def __call__(self, x):
        x = jnp.asarray(x, jnp.float32)
        features = x.shape[-1]
        mean2 = jnp.mean(lax.square(x), axis=-1, keepdims=True)
        y = jnp.asarray(x * lax.rsqrt(mean2 + self.epsilon), self.dtype)
        if not self.use_scale:
            return y
        scale = self.param("scale", self.scale_init, (features,), jnp.float32)
        return y * jnp.asarray(scale, self.dtype)
