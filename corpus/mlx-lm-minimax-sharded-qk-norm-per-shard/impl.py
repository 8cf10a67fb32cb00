"""MiniMax's q/k norm in mlx-lm at 1fd521c, run tensor-parallel on two devices (mx.distributed),
written here from reading it, in MLX:
  - mlx_lm/models/minimax.py lines 62-68 and 83-85: q_norm / k_norm are nn.RMSNorm over the whole
    projection (num_heads * head_dim), applied before the heads are split;
  - Model.shard, lines 279-305: the projections are sharded by heads and each norm's weight is
    split N ways, but the norm stays an nn.RMSNorm, so on each device it normalises only that
    device's slice of the vector by that slice's own RMS.
nn.RMSNorm calls mx.fast.rms_norm(x, weight, eps). Modelled at N = 2 (the two halves of the heads),
as two devices compute it. Fixed by PR #898 (a ShardedRMSNorm that all-sums the squares).
"""
import mlx.core as mx

N_DEVICES = 2


def minimax_qk_norm_tp(x, weight, num_heads, eps):
    """The q (or k) norm as the N devices compute it, their outputs side by side."""
    xs = mx.split(x, N_DEVICES, axis=-1)            # each device's heads
    ws = mx.split(weight, N_DEVICES, axis=-1)       # weight.split(N, axis=-1)[rank]
    return mx.concatenate([mx.fast.rms_norm(xi, wi, eps) for xi, wi in zip(xs, ws)], axis=-1)
