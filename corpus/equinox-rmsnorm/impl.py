"""A model of equinox's RMSNorm at 9336d82 (patrick-kidger/equinox equinox/nn/_normalisation.py, lines
286-407), written here from reading it, as a plain class because equinox is not installed here (an
equinox Module is an immutable dataclass pytree; the fields and the call are the same).
RMSNorm(shape, eps=1e-5, use_weight=True, use_bias=True, dtype=None): shape an int or tuple, weight ones
and bias zeros of that shape in dtype (float32 by default). The call takes ONE example: x must have
exactly `shape` (batches go through jax.vmap), else ValueError. It computes in the promotion of x's
dtype with float32: x converted, inv_rms = rsqrt(mean(x**2) + eps) over the whole example,
out = inv_rms * x, then weight * out, then + bias, and returns out in x's original dtype."""
import jax
import jax.numpy as jnp

_sentinel = object()


class RMSNorm:
    def __init__(self, shape, eps: float = 1e-5, use_weight: bool = True, use_bias: bool = True, dtype=None):
        dtype = jnp.float32 if dtype is None else dtype
        self.shape = (shape,) if isinstance(shape, int) else tuple(shape)
        self.eps = eps
        self.use_weight = use_weight
        self.use_bias = use_bias
        self.weight = jnp.ones(self.shape, dtype=dtype) if use_weight else None
        self.bias = jnp.zeros(self.shape, dtype=dtype) if use_bias else None

    def __call__(self, x, state=_sentinel, *, key=None):
        if x.shape != self.shape:  # one example, exactly the declared shape
            raise ValueError(f"RMSNorm(shape)(x) needs x.shape == shape; got shape={self.shape} and "
                             f"x.shape={x.shape}: use jax.vmap(rms_norm)(x) for a batch")
        orig_dtype = x.dtype
        with jax.numpy_dtype_promotion("standard"):
            dtype = jnp.result_type(x.dtype, jnp.float32)
        x = x.astype(dtype)
        inv_rms = jax.lax.rsqrt(jnp.mean(x**2) + self.eps)
        out = inv_rms * x
        if self.use_weight:
            out = self.weight.astype(dtype) * out
        if self.use_bias:
            out = out + self.bias.astype(dtype)
        return out.astype(orig_dtype) if state is _sentinel else (out.astype(orig_dtype), state)
