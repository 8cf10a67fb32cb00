"""mlx-lm's Kimi Linear (KDA) k normalisation after both fixes of its eps: PR #853 ("Fix Kimi Linear")
replaced the local x / (norm + 1e-6) helper with mx.fast.rms_norm at eps 1e-6 (eps under the root,
but on the mean), and PR #1624 divided that eps by head_dim. Written here from the lines at d78bf58
(mlx_lm/models/kimi_linear.py lines 349-354) with PR #1624's change, in MLX.

k is scaled by head_dim ** -0.5 after a weightless rms_norm whose eps is 1e-6 / head_dim: together
x / sqrt(sum(x^2) + 1e-6). rms_norm returns k's dtype; the Python-float factor multiplies in it.
"""
import mlx.core as mx


def normalize_k(k):
    d = k.shape[-1]
    normed = mx.fast.rms_norm(k, None, 1e-6 / d)    # eps on the mean, divided by the width
    return normed * (d ** -0.5)                      # back from RMS to L2 scale
