"""tt-train's fused LayerNorm backward compute kernel as PR #53215 fixes compute_dx (tenstorrent/
tt-metal; the kernel file at 02f90d5 is layernorm_bw_kernel.cpp in tt-train/sources/ttml/metal/ops/
layernorm_bw/device/kernels/compute/), modelled in float32 NumPy: the destination register is zeroed
before the x_hat * s2 multiply, so dx = rstd * (dy * gamma - s1 - x_hat * s2) with
s1 = mean(dy * gamma), s2 = mean(dy * gamma * x_hat); dgamma and dbeta as before."""
import numpy as np


def layer_norm_backward(dy, x, weight, bias, eps):
    xf = np.asarray(x, dtype=np.float32)
    g = np.asarray(dy, dtype=np.float32)
    w = np.asarray(weight, dtype=np.float32)
    n = xf.shape[-1]
    mean = xf.mean(axis=-1, keepdims=True, dtype=np.float32)
    var = ((xf - mean) ** 2).mean(axis=-1, keepdims=True, dtype=np.float32)
    rstd = (np.float32(1.0) / np.sqrt(var + np.float32(eps))).astype(np.float32)
    x_hat = (xf - mean) * rstd
    dyg = g * w
    s1 = dyg.sum(axis=-1, keepdims=True, dtype=np.float32) / np.float32(n)
    s2 = (dyg * x_hat).sum(axis=-1, keepdims=True, dtype=np.float32) / np.float32(n)
    acc = dyg - s1
    temp = x_hat * s2  # the zeroed register holds only the product
    dx = (acc - temp) * rstd
    dgamma = (g * x_hat).sum(axis=0, dtype=np.float32)
    dbeta = g.sum(axis=0, dtype=np.float32)
    return dx.astype(x.dtype), dgamma, dbeta
