"""torch.nn.LayerNorm (torch 2.13.0, torch/nn/modules/normalization.py lines 105-236), called as it
is with bias=False: LayerNorm(normalized_shape, eps=1e-5, elementwise_affine=True, bias=True). With
bias=False it holds a weight and no bias (the LayerNorm of Cohere, OLMo-style ports and GPT models
trained without biases); on CPU a half input is normalised in float32 and rounded once."""
from torch.nn import LayerNorm  # noqa: F401
