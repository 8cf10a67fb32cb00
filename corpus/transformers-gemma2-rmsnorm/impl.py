"""transformers' Gemma2RMSNorm (transformers 5.24.0, models/gemma2/modeling_gemma2.py lines 49-66),
called as it is. Its constructor takes `dim` (not hidden_size); the weight is zero-initialised and
applied as 1 + w in float32, and the product is rounded once to the input dtype."""
from transformers.models.gemma2.modeling_gemma2 import Gemma2RMSNorm  # noqa: F401
