"""flax.linen.LayerNorm (flax 0.12.8, flax/linen/normalization.py lines 424-538), called as it is: a
linen module, whose parameters live outside the module in a variables dict built by .init(rng, x) and
applied with .apply(variables, x). LayerNorm(epsilon=1e-6, dtype=None, param_dtype=float32,
use_bias=True, use_scale=True, ..., use_fast_variance=True)."""
from flax.linen import LayerNorm  # noqa: F401
