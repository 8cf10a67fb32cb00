"""transformers' MoshiRMSNorm (transformers 5.24.0, models/moshi/modeling_moshi.py lines 190-206),
called as it is. Constructor MoshiRMSNorm(dim, eps): `dim`, not hidden_size. The input is upcast, scaled
by rsqrt(mean of squares + eps), multiplied by the float32 weight and rounded once (type_as). Plain
gamma, all in float32. MoshiConfig's rms_norm_eps is 1e-8, far below the usual 1e-6."""
from transformers.models.moshi.modeling_moshi import MoshiRMSNorm  # noqa: F401
