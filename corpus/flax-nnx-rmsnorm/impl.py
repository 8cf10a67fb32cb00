"""flax.nnx.RMSNorm (flax 0.12.8, flax/nnx/nn/normalization.py lines 588-719), called as it is:
RMSNorm(num_features, *, epsilon=1e-6, dtype=None, param_dtype=float32, use_scale=True, ..., rngs).
Its gain is `scale`; the statistic is taken in float32 (force_float32_reductions) and the result is in
the promoted dtype, float32 for half input with float32 params."""
from flax.nnx import RMSNorm  # noqa: F401
