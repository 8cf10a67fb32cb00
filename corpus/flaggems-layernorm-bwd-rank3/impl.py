"""A model of FlagGems' LayerNorm backward at f1615be (src/flag_gems/ops/layernorm.py:
layer_norm_backward, L405-L451, with layer_norm_backward_kernel and weight_bias_backward_kernel),
written here from reading it, in float32 NumPy.

Forward statistics (`layer_norm`): N = prod(normalized_shape), M = numel // N, one mean and one rstd
per row of N, stored in the input's dtype.

Backward, the bug (issue #5392): M = input.shape[0] and N = numel // M. For a matrix (rows, hidden)
that is the forward's M and N; for a batch of sequences (batch, seq, hidden) a "row" is a whole
sequence of seq * hidden elements. The dx kernel then runs M programs, each with the saved mean and
rstd of rows 0..M-1 (Mean + pid), and reads the weight at columns 0..N-1, past its hidden elements
(what lies there: NaN here, as normdiff's Triton layer reads it); the dw / db kernel sums over M
rows at each of N columns and stores N values into a weight gradient of hidden (the rest past its
end: not kept here)."""
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
    m = x.shape[0]  # the bug: the first dimension taken for the rows
    n = x.size // m
    xf = np.asarray(x, dtype=np.float32).reshape(m, n)
    g = np.asarray(dy, dtype=np.float32).reshape(m, n)
    mean, rstd = mean[:m], rstd[:m]  # Mean + pid, Rstd + pid for pid < M
    w = np.full(n, np.nan, dtype=np.float32)  # columns past the weight's end
    w[:hidden] = np.asarray(weight, dtype=np.float32)
    x_hat = (xf - mean) * rstd
    dx_hat = g * w
    s2 = dx_hat.sum(axis=-1, keepdims=True, dtype=np.float32)
    s3 = (dx_hat * x_hat).sum(axis=-1, keepdims=True, dtype=np.float32)
    dx = rstd * (dx_hat - (s2 + x_hat * s3) / np.float32(n))
    dw = (g * (xf - mean) * rstd).sum(axis=0, dtype=np.float32)[:hidden]  # N columns, hidden kept
    db = g.sum(axis=0, dtype=np.float32)[:hidden]
    return dx.reshape(x.shape).astype(x.dtype), dw.astype(weight.dtype), db.astype(weight.dtype)
