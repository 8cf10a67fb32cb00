"""A model of FlagGems' rms_norm backward at 24f6509 (src/flag_gems/ops/rms_norm.py, the parent of
PR #1084): the inverse RMS its forward kernel saves (lines 15-50), rms_norm_grad_dx_kernel (lines
53-89), rms_norm_grad_dw_kernel (lines 92-145) and RmsNorm.backward (lines 168-222), written here
from reading them, in PyTorch.

Saved statistic: inv_rms = 1 / sqrt(sum(x^2) / N + eps) in float32 per row.
dx: one program per row reads x and *dy through x's strides* (row stride N, column stride 1), so a
dy that is not contiguous is read as if it were (the bug of FlagGems issue #1068): g = dy * w,
x_hat = x * inv_rms, dx = (g - x_hat / N * sum(x_hat g)) * inv_rms in float32, stored in x's dtype.
dw: float32 partial sums of x * dy * inv_rms over blocks of 16 rows (dy again read as contiguous),
then torch.sum over the blocks with dtype=x.dtype, which first casts each float32 partial to the
input dtype (the second change of PR #1084)."""
import torch

ROW_BLOCK_SIZE = 16


def _as_if_contiguous(t):
    # what a kernel handed t.data_ptr() and row-major strides reads
    n = t.shape[-1]
    return torch.as_strided(t, t.shape, (n, 1), t.storage_offset())


def rms_norm_backward(dy, x, weight, eps):
    x = x.contiguous()
    m, n = x.shape
    xf = x.float()
    inv_rms = 1.0 / torch.sqrt((xf * xf).sum(dim=-1, keepdim=True) / n + eps)  # float32, as saved
    dyf = _as_if_contiguous(dy).float()
    g = dyf * weight.float()
    x_hat = xf * inv_rms
    row_sum = (x_hat * g).sum(dim=-1, keepdim=True)
    dx = ((g - (x_hat / n) * row_sum) * inv_rms).to(x.dtype)
    blocks = (m + ROW_BLOCK_SIZE - 1) // ROW_BLOCK_SIZE
    partial = torch.zeros((blocks, n), dtype=torch.float32)
    for b in range(blocks):
        rows = slice(b * ROW_BLOCK_SIZE, (b + 1) * ROW_BLOCK_SIZE)
        partial[b] = (xf[rows] * dyf[rows] * inv_rms[rows]).sum(dim=0)
    dw = torch.sum(partial, dim=0, dtype=x.dtype)  # each partial cast to x's dtype first
    return dx, dw
