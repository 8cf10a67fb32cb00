"""transformers' ImageGPTLayerNorm (transformers 5.24.0, models/imagegpt/modeling_imagegpt.py lines
49-59), called as it is: despite the name an RMSNorm (no centring), computed entirely in the input dtype:
square, mean, + eps, sqrt, divide, times the weight, each in that dtype. ImageGPT is a float32 model;
ImageGPTConfig's layer_norm_epsilon is 1e-5."""
from transformers.models.imagegpt.modeling_imagegpt import ImageGPTLayerNorm  # noqa: F401
