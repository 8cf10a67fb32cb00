"""transformers' OlmoeRMSNorm (transformers 5.24.0, models/olmoe/modeling_olmoe.py lines 43-61), called
as it is, as OLMoE's attention uses it for q_norm / k_norm: one norm over the whole projected q (all
heads together, width num_heads * head_dim), not per head. Its cast is Llama's (the normalised value
rounded to the input dtype, then times the weight). OlmoeConfig's rms_norm_eps is 1e-5."""
from transformers.models.olmoe.modeling_olmoe import OlmoeRMSNorm  # noqa: F401
