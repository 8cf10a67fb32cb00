"""A model of flash-linear-attention's l2norm forward at bc3b101 (fla/modules/l2norm.py: the Triton
kernels l2norm_fwd_kernel, lines 84-109, and l2norm_fwd_kernel1, lines 27-46, dispatched by l2norm_fwd,
lines 148-197; public l2norm(x, eps=1e-6, output_dtype=None), lines 277-282), written here in PyTorch
from reading it. Each row is loaded and widened to float32, rstd = 1 / sqrt(sum of x * x + eps) in
float32 (a block-wide tl.sum, here torch's float32 sum), y = x * rstd, stored in the output dtype (the
input's unless output_dtype says otherwise)."""
import torch


def l2norm(x, eps=1e-6, output_dtype=None):
    xf = x.float()
    rstd = 1 / torch.sqrt((xf * xf).sum(dim=-1, keepdim=True) + eps)
    y = xf * rstd
    return y.to(x.dtype if output_dtype is None else output_dtype)
