"""A model of LMDeploy TurboMind's RMSNorm for Qwen3.5 at 04feabe (PR #4790, "fix zero-centered
RMSNorm for Qwen3.5"), written here from reading it, in PyTorch:
  - lmdeploy/turbomind/models/qwen3_5.py: norm weights loaded as they are, with zero_centered=True;
  - src/turbomind/kernels/norm/rms_norm.cu, kernel RMSNorm, lines 21-83, with
    src/turbomind/kernels/norm/rms_norm_utils.cuh lines 6-15 (ApplyRMSnorm<true>): per row, the
    squares accumulated in float32, rsqrtf(sum * (1 / dim) + eps), then each element as
    T(float(x) * inv_rms * (1 + float(w))): the offset in float32, one rounding.
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
        xf = x.float()
        total = (xf * xf).sum(-1, keepdim=True)                 # float32 accumulation
        inv_dims = torch.tensor(1.0 / x.shape[-1], dtype=torch.float32)
        inv_rms = torch.rsqrt(total * inv_dims + self.eps)
        return (xf * inv_rms * (1.0 + self.weight.float())).to(dtype)   # ApplyRMSnorm<true>
