"""The k normalisation in mlx-lm's Kimi Linear (KDA) attention as PR #1624 ("[kimi_linear] Fix KDA
q/k normalization eps to match reference l2norm semantics") makes it: the lines at d78bf58
(mlx_lm/models/kimi_linear.py lines 352-354) with rms_norm's eps set to 1e-6 / head_dim, as the PR
describes its change. Written here, in MLX.

k = head_dim ** -0.5 * mx.fast.rms_norm(k, None, 1e-6 / head_dim) = x / sqrt(sum(x^2) + 1e-6), the
reference's L2 norm. mx.fast.rms_norm returns the input dtype; the Python-float scale then
multiplies in that dtype (a second rounding for bf16 / fp16).
"""
import mlx.core as mx


def kda_k_norm(x):
    head_dim = x.shape[-1]
    inv_scale = float(head_dim) ** -0.5
    return inv_scale * mx.fast.rms_norm(x, None, 1e-6 / head_dim)   # eps on the mean = 1e-6 on the sum
