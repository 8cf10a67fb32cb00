"""The query path of transformers' Qwen3MoeAttention (transformers 5.24.0,
models/qwen3_moe/modeling_qwen3_moe.py), put together from the library's own pieces, called as they
are: Qwen3MoeRMSNorm(head_dim, eps) as q_norm on the queries viewed as (..., heads, head_dim) (lines
285-303), then the cos / sin of Qwen3MoeRotaryEmbedding (lines 381-424: float32 inv_freq times the
float32 positions, cos / sin cast to the input dtype) applied by apply_rotary_pos_emb (lines 58-81,
rotate_half form). The config carries Qwen3-MoE's rope_theta 1e6."""
from transformers.models.qwen3_moe.configuration_qwen3_moe import Qwen3MoeConfig
from transformers.models.qwen3_moe.modeling_qwen3_moe import (Qwen3MoeRMSNorm, Qwen3MoeRotaryEmbedding,
                                                              apply_rotary_pos_emb)


def qk_norm_rope(x, weight, positions, num_heads, eps):
    rows, width = x.shape
    head_dim = width // num_heads
    q_norm = Qwen3MoeRMSNorm(head_dim, eps=eps)
    del q_norm.weight
    q_norm.weight = weight  # the case's weight itself, so that its gradient reaches it
    config = Qwen3MoeConfig(hidden_size=width, num_attention_heads=num_heads, num_key_value_heads=num_heads,
                            head_dim=head_dim, rope_parameters={"rope_type": "default", "rope_theta": 1e6})
    rotary = Qwen3MoeRotaryEmbedding(config)
    # (batch 1, heads, tokens, head_dim), as the attention lays q out after its transpose
    q = q_norm(x.view(1, rows, num_heads, head_dim)).transpose(1, 2)
    cos, sin = rotary(q, positions.view(1, rows))
    q, _ = apply_rotary_pos_emb(q, q, cos, sin)
    return q.transpose(1, 2).reshape(rows, width)
