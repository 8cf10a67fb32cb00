"""A port of Llama's RMSNorm to NumPy, as the quickstarts check it (docs/quickstart-porting.md).

`rms_norm` is right; `rms_norm_eps_outside` has the classic bug, eps added outside the square root:
the same numbers at rms(x) = 1, badly wrong on tiny activations.
"""
import numpy as np


def rms_norm(x, weight, eps):
    """LlamaRMSNorm: the statistic in float32, x * rsqrt(mean(x^2) + eps) rounded to x's dtype, then
    times the weight."""
    xf = x.astype(np.float32)
    y = xf / np.sqrt((xf * xf).mean(-1, keepdims=True) + np.float32(eps))
    return weight * y.astype(x.dtype)


def rms_norm_eps_outside(x, weight, eps):
    xf = x.astype(np.float32)
    y = xf / (np.sqrt((xf * xf).mean(-1, keepdims=True)) + np.float32(eps))
    return weight * y.astype(x.dtype)
