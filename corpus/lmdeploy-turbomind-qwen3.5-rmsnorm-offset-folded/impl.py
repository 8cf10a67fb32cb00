"""A model of LMDeploy TurboMind's RMSNorm for Qwen3.5 at 5701647, written here from reading it, in
PyTorch:
  - lmdeploy/turbomind/models/qwen3_5.py lines 74-75 and 260-261: each norm weight is loaded as
    1.0 + w.float() (the zero-centred offset folded in at load time, in float32);
  - lmdeploy/turbomind/builders/_base.py lines 210-211 and src/turbomind/models/norm_weight.cc
    line 12-15: the norm module takes the model's dtype and prepare() casts the folded weight to it,
    so the kernel reads bf16(1 + w) for a bf16 model;
  - src/turbomind/kernels/norm/rms_norm.cu, kernel RMSNorm, lines 20-83: per row, the squares
    accumulated in float32 (per-thread partial sums, then a CUB block reduction), rsqrtf(sum *
    (1 / dim) + eps) in float32, then each element cast to float, multiplied by it, cast back to
    the model dtype T, and multiplied by the T weight in T (Llama's cast).
Fixed by PR #4790, which keeps the raw weight and applies 1 + w in float32 inside the kernel, with
one rounding at the end (ApplyRMSnorm<true>).
"""
import torch
from torch import nn


class TurboMindQwen35RMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(hidden_size))   # the checkpoint's zero-centred weight
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        folded = (1.0 + self.weight.float()).to(dtype)          # load: 1 + w in float32; prepare(): to T
        xf = x.float()
        total = (xf * xf).sum(-1, keepdim=True)                 # float32 accumulation
        inv_dims = torch.tensor(1.0 / x.shape[-1], dtype=torch.float32)
        inv_rms = torch.rsqrt(total * inv_dims + self.eps)      # rsqrtf(sum * inv_dims + eps)
        return (xf * inv_rms).to(dtype) * folded                # (T)(x * inv_rms) * w_T, in T
