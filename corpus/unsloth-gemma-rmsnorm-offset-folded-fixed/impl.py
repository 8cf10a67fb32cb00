"""Unsloth's Gemma RMSNorm on its training path at 70f271b (PR #223, "Fix Gemma"), written here from
reading it, in PyTorch:
  - unsloth/models/gemma.py: the in-place `module.weight += 1.0` is commented out ("Leave + 1 to
    Triton kernel itself", lines 336-345), and the decoder layer calls
    fast_rms_layernorm(..., gemma = True) (lines 109 and 125);
  - unsloth/kernels/rms_layernorm.py, _gemma_rms_layernorm_forward (lines 98-127): x and w loaded and
    cast to float32, the mean of x * x, inv = 1 / sqrt(mean + eps), x * inv * (w + 1.0), all float32,
    stored once in the input dtype.
The float32 sum is a tree reduction on the GPU; torch's CPU sum stands in for it.
"""
import torch
from torch import nn


class GemmaRMSNormUnsloth(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(hidden_size))   # Gemma's stored, zero-centred weight
        self.variance_epsilon = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        wf = self.weight.float()
        inv_var = 1.0 / torch.sqrt((xf * xf).sum(-1, keepdim=True) / x.shape[-1] + self.variance_epsilon)
        return (xf * inv_var * (wf + 1.0)).to(x.dtype)            # one rounding
