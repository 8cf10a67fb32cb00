"""transformers' NemotronLayerNorm1P (transformers 5.24.0, models/nemotron/modeling_nemotron.py lines
62-80), called as it is: an nn.LayerNorm subclass whose forward hands F.layer_norm the weight plus one
(zero-centred storage, Megatron's "layernorm1p"), computed in the module's dtype, with its bias and eps,
autocast off. Constructor NemotronLayerNorm1P(normalized_shape, eps=1e-5, elementwise_affine, bias)."""
from transformers.models.nemotron.modeling_nemotron import NemotronLayerNorm1P  # noqa: F401
