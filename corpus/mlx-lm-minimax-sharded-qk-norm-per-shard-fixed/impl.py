"""MiniMax's q/k norm in mlx-lm at d7b91e8 (PR #898, "Fix sharded rms norm in MiniMax M2.5"), run
tensor-parallel on two devices, written here from reading it, in MLX:
  - mlx_lm/models/minimax.py lines 37-83: sharded_rms_norm / ShardedRMSNorm. Each device casts its
    slice to float32 and sums the squares; mx.distributed.all_sum adds the devices' sums; the
    inverse RMS is rsqrt(total / (local width * N) + eps); each device returns
    (x.astype(float32) * inv_rms * w).astype(x.dtype) for its slice (w its slice of the weight);
  - Model.shard, lines 345-352: q_norm / k_norm replaced by ShardedRMSNorm.from_rms_norm.
Modelled at N = 2: the all_sum is the sum of the two devices' partial sums.
"""
import mlx.core as mx

N_DEVICES = 2


def minimax_qk_norm_tp(x, weight, num_heads, eps):
    """The q (or k) norm as the N devices compute it, their outputs side by side."""
    xs = mx.split(x, N_DEVICES, axis=-1)
    ws = mx.split(weight, N_DEVICES, axis=-1)
    partial = [xi.astype(mx.float32).square().sum(-1, keepdims=True) for xi in xs]   # per device
    total = partial[0]
    for p in partial[1:]:
        total = total + p                                   # all_sum over the group
    outs = []
    for xi, wi in zip(xs, ws):
        inv_rms = mx.rsqrt(total / (xi.shape[-1] * N_DEVICES) + eps)
        outs.append((xi.astype(mx.float32) * inv_rms * wi).astype(xi.dtype))
    return mx.concatenate(outs, axis=-1)
