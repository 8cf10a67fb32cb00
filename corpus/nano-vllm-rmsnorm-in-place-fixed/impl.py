"""The fix of nano-vllm issue #170 (PR #171), modelled: the same arithmetic as the bug's model
(upcast, float32 mean of squares, scale by rsqrt(mean + eps), cast back, weight multiplied in the
input dtype: Llama's cast), every step out of place, so the caller's x is never written."""
import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        up = x.float()
        up = up * torch.rsqrt(up.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return up.to(dtype) * self.weight
