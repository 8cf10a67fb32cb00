"""transformers' KimiLinearRMSNormGated (transformers 5.24.0, models/kimi_linear/modeling_kimi_linear.py
lines 75-95), called as it is: RMSNorm in float32 with the weight in float32, then multiplied by
sigmoid(gate) (its activation is fixed to "sigmoid"), rounded once to the input dtype. Norm first, gate
after, like Qwen3-Next's gated norm, but with a sigmoid gate where Qwen3-Next has silu."""
from transformers.models.kimi_linear.modeling_kimi_linear import KimiLinearRMSNormGated  # noqa: F401
