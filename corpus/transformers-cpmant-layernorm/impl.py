"""transformers' CpmAntLayerNorm (transformers 5.24.0, models/cpmant/modeling_cpmant.py lines 37-59),
called as it is. Its constructor takes only a CpmAntConfig (hidden_size and eps are read from it). The
forward takes the mean of squares in float32, scales the input by rsqrt(variance + eps) (a float32
product), casts to the input dtype, then multiplies by the weight: Llama's cast. CpmAntConfig's eps is
1e-6."""
from transformers.models.cpmant.modeling_cpmant import CpmAntLayerNorm  # noqa: F401
