"""A model of the k normalisation in mlx-lm's Kimi Linear (KDA) attention at 3833c20 (PR #577, "Add
Kimi Linear"): mlx_lm/models/kimi_linear.py lines 349-354, written here from reading it, in MLX.

A local helper divides each head vector by its L2 norm plus a literal eps: the norm from
mx.linalg.norm over the head dimension, in the array's dtype, then x / (norm + 1e-6): eps added to
the norm, outside the square root. The reference (the official modelling through fla's KDA
kernels) uses x / sqrt(sum(x^2) + 1e-6). q is then scaled by head_dim ** -0.5; k, modelled here,
is used as normalised. Replaced in PR #853 by a fused rms_norm.
"""
import mlx.core as mx


def kda_k_norm(x):
    norm = mx.linalg.norm(x, axis=-1, keepdims=True)   # in x's dtype
    return x / (norm + 1e-6)                            # eps outside the square root
