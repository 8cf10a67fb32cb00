"""transformers' T5LayerNorm (transformers 5.24.0, models/t5/modeling_t5.py lines 51-73), called as it
is. Despite its name it is an RMSNorm: no mean subtracted, no bias. The mean of squares is taken on a
float32 copy, the input scaled by its rsqrt (which promotes a half input to float32), the result cast
to the weight's dtype when that dtype is half, then multiplied by the weight: Llama's cast order.
Constructor T5LayerNorm(hidden_size, eps=1e-6); the eps attribute is `variance_epsilon`."""
from transformers.models.t5.modeling_t5 import T5LayerNorm  # noqa: F401
