"""A model of the query path of mlx-lm's Qwen3 attention at d78bf58 (ml-explore/mlx-lm
mlx_lm/models/qwen3.py, lines 32-89), written here from reading it, calling the same MLX layers it
calls: q_norm is mlx.nn.RMSNorm(head_dim, eps=rms_norm_eps) applied to the projected queries reshaped to
(batch, length, heads, head_dim), the result transposed to (batch, heads, length, head_dim), then the
rotary embedding built by initialize_rope (mlx_lm/models/rope_utils.py: with no rope_scaling it is
mlx.nn.RoPE(head_dim, traditional=False, base=rope_theta)), applied with the cache's offset. Here each
row of x is one token of its own sequence (length 1) whose offset is its position, which is how the
decoding path meets it; Qwen3's rope_theta is 1e6."""
import mlx.core as mx
import mlx.nn as nn


def qk_norm_rope(x, weight, positions, num_heads, eps):
    rows, width = x.shape
    head_dim = width // num_heads
    q_norm = nn.RMSNorm(head_dim, eps=eps)
    q_norm.weight = weight
    # (rows, 1, heads, head_dim): each row a batch of one token
    q = q_norm(x.reshape(rows, 1, num_heads, head_dim)).transpose(0, 2, 1, 3)
    rope = nn.RoPE(head_dim, traditional=False, base=1e6)
    # nn.RoPE passes its offset to mx.fast.rope, which takes one offset per batch element
    q = mx.fast.rope(q, rope.dims, traditional=rope.traditional, base=rope.base, scale=rope.scale,
                     offset=mx.array(positions).astype(mx.int32))
    return q.transpose(0, 2, 1, 3).reshape(rows, width)
