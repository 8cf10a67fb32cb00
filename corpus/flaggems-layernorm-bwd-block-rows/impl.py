"""A model of FlagGems' LayerNorm backward at d1eeb24 (src/flag_gems/ops/layernorm.py, the parent of
the fix): the statistics its forward kernel saves (lines 19-80) and the two backward kernels,
layer_norm_backward_kernel (lines 95-147) and weight_bias_backward_kernel (lines 158-192), written
here from reading them, in float32 NumPy.

Forward statistics: float32 mean and two-pass variance, rstd = 1 / sqrt(var + eps), both *stored in
the input's dtype* (the saved mean and rstd tensors are allocated like x).

Backward: each program takes a block of BLOCK_ROW_SIZE rows (autotuned among 1, 2, 4 and 8 rows);
it accumulates dy * w and dy * w * x_hat for the block, and then (the bug, FlagGems PR #59) reduces
each accumulator over the whole block, rows and columns alike, to one scalar, so every row's dx is
formed with the block's sums instead of its own: dx = rstd * (dy w - (s2 + x_hat s3) / N). The
model runs the 8-row configuration (with the 1-row one the bug is invisible). dw and db: float32
column sums of dy * x_hat and dy over all rows, stored in the weight's dtype."""
import numpy as np

BLOCK_ROW_SIZE = 8


def _saved_stats(xf, eps, dtype):
    n = xf.shape[-1]
    mean = xf.sum(axis=-1, keepdims=True, dtype=np.float32) / np.float32(n)
    d = xf - mean
    var = (d * d).sum(axis=-1, keepdims=True, dtype=np.float32) / np.float32(n)
    rstd = np.float32(1.0) / np.sqrt(var + np.float32(eps))
    # stored in the input's dtype, read back as float32 by the backward kernels
    return mean.astype(dtype).astype(np.float32), rstd.astype(dtype).astype(np.float32)


def _row_sums(a, m):
    # the bug: one sum per block of BLOCK_ROW_SIZE rows (over rows and columns), given to every row
    out = np.empty((m, 1), dtype=np.float32)
    for start in range(0, m, BLOCK_ROW_SIZE):
        blk = a[start:start + BLOCK_ROW_SIZE]
        out[start:start + BLOCK_ROW_SIZE] = blk.sum(dtype=np.float32)
    return out


def layer_norm_backward(dy, x, weight, bias, eps):
    xf = np.asarray(x, dtype=np.float32)
    g = np.asarray(dy, dtype=np.float32)
    w = np.asarray(weight, dtype=np.float32)
    m, n = xf.shape
    mean, rstd = _saved_stats(xf, eps, x.dtype)
    x_hat = (xf - mean) * rstd
    dx_hat = g * w
    s2 = _row_sums(dx_hat, m)
    s3 = _row_sums(dx_hat * x_hat, m)
    dx = rstd * (dx_hat - (s2 + x_hat * s3) / np.float32(n))
    dw = (g * x_hat).sum(axis=0, dtype=np.float32)
    db = g.sum(axis=0, dtype=np.float32)
    return dx.astype(x.dtype), dw.astype(weight.dtype), db.astype(weight.dtype)
