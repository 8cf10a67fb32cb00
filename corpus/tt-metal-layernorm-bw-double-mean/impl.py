"""A model of tt-train's fused LayerNorm backward compute kernel (tenstorrent/tt-metal at 02f90d5,
tt-train/sources/ttml/metal/ops/layernorm_bw/device/kernels/compute/layernorm_bw_kernel.cpp: the
everything-fits-in-L1 path, compute_dy_gamma_sum, compute_dy_gamma_xnorm_sum and compute_dx, the
latter at lines 416-448 as issue #53204 cites them), written here from reading it, in float32
NumPy; the forward's saved mean and rstd are recomputed here in float32 (two-pass), as the
forward kernel saves them.

Per row the kernel forms x_hat = (x - mean) * rstd, s1 = mean(dy * gamma) and
s2 = mean(dy * gamma * x_hat), then dx = rstd * (dy * gamma - s1 - x_hat * s2). In compute_dx the
register that held s1 for the first subtraction is then the destination of the x_hat * s2 multiply,
and on Wormhole/Blackhole that multiply accumulates into the destination register instead of
overwriting it (the bug, issue #53204): the second subtraction removes s1 + x_hat * s2, so s1 is
subtracted twice. dgamma sums dy * x_hat over rows, dbeta sums dy."""
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
    acc = dyg - s1  # first subtraction
    temp = s1 + x_hat * s2  # the multiply lands on the register still holding s1
    dx = (acc - temp) * rstd
    dgamma = (g * x_hat).sum(axis=0, dtype=np.float32)
    dbeta = g.sum(axis=0, dtype=np.float32)
    return dx.astype(x.dtype), dgamma, dbeta
