"""FlagGems' rms_norm backward as PR #1084 (commit bea8da9) fixes it (src/flag_gems/ops/rms_norm.py,
RmsNorm.backward, lines 170-226, and the kernels it launches), modelled in PyTorch: dy is made
contiguous before the kernels read it with x's strides, and the 16-row float32 partial sums of
x * dy * inv_rms are summed in float32 and only then cast to x's dtype. dx as before:
g = dy * w, x_hat = x * inv_rms, dx = (g - x_hat / N * sum(x_hat g)) * inv_rms in float32."""
import torch

ROW_BLOCK_SIZE = 16


def rms_norm_backward(dy, x, weight, eps):
    x = x.contiguous()
    dy = dy.contiguous()  # the fix
    m, n = x.shape
    xf = x.float()
    inv_rms = 1.0 / torch.sqrt((xf * xf).sum(dim=-1, keepdim=True) / n + eps)
    dyf = dy.float()
    g = dyf * weight.float()
    x_hat = xf * inv_rms
    row_sum = (x_hat * g).sum(dim=-1, keepdim=True)
    dx = ((g - (x_hat / n) * row_sum) * inv_rms).to(x.dtype)
    blocks = (m + ROW_BLOCK_SIZE - 1) // ROW_BLOCK_SIZE
    partial = torch.zeros((blocks, n), dtype=torch.float32)
    for b in range(blocks):
        rows = slice(b * ROW_BLOCK_SIZE, (b + 1) * ROW_BLOCK_SIZE)
        partial[b] = (xf[rows] * dyf[rows] * inv_rms[rows]).sum(dim=0)
    dw = torch.sum(partial, dim=0, dtype=torch.float32).to(x.dtype)  # the fix: float32, then cast
    return dx, dw
