"""transformers' MistralRMSNorm (transformers 5.24.0, models/mistral/modeling_mistral.py lines 182-200),
called as it is: upcast to float32, mean of squares, scale by rsqrt(mean + eps), cast back to the input
dtype, then times the weight (Llama's cast). MistralConfig's rms_norm_eps is 1e-6."""
from transformers.models.mistral.modeling_mistral import MistralRMSNorm  # noqa: F401
