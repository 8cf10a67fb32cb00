"""A model of the arithmetic of haiku's RMSNorm.__call__ at f4d858a (google-deepmind/dm-haiku
haiku/_src/rms_norm.py, lines 44-133), written here in JAX from reading it, as a function of the
input, the `scale` parameter and eps (the hk.Module / hk.transform machinery that creates the parameter
is left out: it does not touch the values). The scale parameter is created in the input's dtype; the
mean of jnp.square(inputs) is taken over the axis, and the result is inputs * scale *
rsqrt(mean_squared + eps), every step in the input dtype (no upcast)."""
import jax
import jax.numpy as jnp


def rms_norm(inputs, scale, eps=1e-5):
    inputs = jnp.asarray(inputs)
    scale = jnp.asarray(scale, inputs.dtype)  # hk.get_parameter(..., inputs.dtype, ...)
    scale = jnp.broadcast_to(scale, inputs.shape)
    mean_squared = jnp.mean(jnp.square(inputs), axis=-1, keepdims=True)
    mean_squared = jnp.broadcast_to(mean_squared, inputs.shape)
    return inputs * scale * jax.lax.rsqrt(mean_squared + eps)
