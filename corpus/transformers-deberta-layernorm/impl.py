"""transformers' DebertaLayerNorm (transformers 5.24.0, models/deberta/modeling_deberta.py lines 38-55),
called as it is: the input upcast to float32, the mean and the (biased, two-pass) variance taken, the
centred input divided by sqrt(variance + eps) and cast back to the input dtype, then weight * it + bias in
the input dtype (the Llama cast applied to a LayerNorm). Constructor DebertaLayerNorm(size, eps=1e-12);
DeBERTa's config passes layer_norm_eps = 1e-7."""
from transformers.models.deberta.modeling_deberta import DebertaLayerNorm  # noqa: F401
