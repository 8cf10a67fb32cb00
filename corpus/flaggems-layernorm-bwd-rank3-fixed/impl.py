"""A model of FlagGems' LayerNorm backward at 06169d1, after the fix of issue #5392
(src/flag_gems/ops/layernorm.py: layer_norm_backward's general path, with layer_norm_backward_kernel
and weight_bias_backward_kernel), written here from reading it, in float32 NumPy.

Forward statistics (`layer_norm`): N = prod(normalized_shape), M = numel // N, one mean and one rstd
per row of N, stored in the input's dtype.

Backward, fixed: N = prod(normalized_shape) and M = numel // N, as the forward takes them (every
leading dimension folded into the rows), so a batch of sequences is its rows.
The fix also adds a fused single-kernel path whose dw / db are float32 atomics per program (the same
sums in another order); modelled here is the general path, as the bug's model is."""
import numpy as np


def _saved_stats(rows, eps, dtype):
    n = rows.shape[-1]
    mean = rows.sum(axis=-1, keepdims=True, dtype=np.float32) / np.float32(n)
    d = rows - mean
    var = (d * d).sum(axis=-1, keepdims=True, dtype=np.float32) / np.float32(n)
    rstd = np.float32(1.0) / np.sqrt(var + np.float32(eps))
    return mean.astype(dtype).astype(np.float32), rstd.astype(dtype).astype(np.float32)


def layer_norm_backward(dy, x, weight, bias, eps):
    hidden = weight.size
    mean, rstd = _saved_stats(np.asarray(x, dtype=np.float32).reshape(-1, hidden), eps, x.dtype)
    n = hidden  # the fix: N from normalized_shape, M = numel // N
    m = x.size // n
    xf = np.asarray(x, dtype=np.float32).reshape(m, n)
    g = np.asarray(dy, dtype=np.float32).reshape(m, n)
    w = np.asarray(weight, dtype=np.float32)
    x_hat = (xf - mean) * rstd
    dx_hat = g * w
    s2 = dx_hat.sum(axis=-1, keepdims=True, dtype=np.float32)
    s3 = (dx_hat * x_hat).sum(axis=-1, keepdims=True, dtype=np.float32)
    dx = rstd * (dx_hat - (s2 + x_hat * s3) / np.float32(n))
    dw = (g * (xf - mean) * rstd).sum(axis=0, dtype=np.float32)
    db = g.sum(axis=0, dtype=np.float32)
    return dx.reshape(x.shape).astype(x.dtype), dw.astype(weight.dtype), db.astype(weight.dtype)
