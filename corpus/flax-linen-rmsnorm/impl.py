"""flax.linen.RMSNorm (flax 0.12.8, flax/linen/normalization.py lines 541-640), called as it is: a
linen module built with its defaults but epsilon, its `scale` param made by .init(rng, x) and run by
.apply(variables, x). RMSNorm(epsilon=1e-6, dtype=None, param_dtype=float32, use_scale=True, ...)."""
from flax.linen import RMSNorm  # noqa: F401
