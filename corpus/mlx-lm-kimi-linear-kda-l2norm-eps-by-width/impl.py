"""A model of the k normalisation in mlx-lm's Kimi Linear (KDA) attention at fd6959d (PR #853, "Fix
Kimi Linear", "Use fused rms_norm"; unchanged through d78bf58): mlx_lm/models/kimi_linear.py lines
352-354, written here from reading it, in MLX.

k = head_dim ** -0.5 * mx.fast.rms_norm(k, None, 1e-6): rms_norm divides by sqrt(mean(x^2) + eps),
so with the head_dim ** -0.5 factor this is x / sqrt(sum(x^2) + head_dim * 1e-6): the L2 norm with
eps multiplied by the width (128x at head_dim 128). The reference (fla's KDA kernels) adds 1e-6 to
the sum. mx.fast.rms_norm returns the input dtype; the Python-float scale then multiplies in that
dtype (a second rounding for bf16 / fp16). Fixed by PR #1624 (eps = 1e-6 / head_dim).
"""
import mlx.core as mx


def kda_k_norm(x):
    inv_scale = float(x.shape[-1]) ** -0.5                    # self.scale, head_dim ** -0.5
    return inv_scale * mx.fast.rms_norm(x, None, 1e-6)        # eps on the mean: head_dim x on the sum
