"""FlagGems' LayerNorm backward as PR #59 (commit 3dd5b06) fixes it (src/flag_gems/ops/layernorm.py:
layer_norm_backward_kernel, lines 95-147, its grid now one program per block of rows), modelled in
float32 NumPy: within a block of BLOCK_ROW_SIZE rows the two accumulators are reduced along the
columns only, so each row's dx uses its own sums: dx = rstd * (dy w - (s2 + x_hat s3) / N). The
rest as before the fix: mean and rstd saved in the input's dtype by the forward, dw and db as float32
column sums stored in the weight's dtype. The 8-row configuration, as in the bug's model."""
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
    # the fix: each accumulator reduced along its columns only, one sum per row of the block
    out = np.empty((m, 1), dtype=np.float32)
    for start in range(0, m, BLOCK_ROW_SIZE):
        blk = a[start:start + BLOCK_ROW_SIZE]
        out[start:start + BLOCK_ROW_SIZE] = blk.sum(axis=1, keepdims=True, dtype=np.float32)
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
