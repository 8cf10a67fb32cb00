"""A model of nano-vllm's RMSNorm.rms_forward at 76c0390 (nanovllm/layers/layernorm.py, lines 12-19),
written here from reading it: the input is upcast to float32, the mean of its squares taken in
float32, the upcast tensor scaled by rsqrt(mean + eps) in place, then cast back to the input dtype
and multiplied by the weight in place in that dtype (Llama's cast).

The upcast of a float32 tensor is that tensor itself, so for float32 input the in-place scaling
writes into the caller's x (nano-vllm issue #170, fixed by PR #171)."""
import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        up = x.float()  # x itself when x is float32
        up.mul_(torch.rsqrt(up.pow(2).mean(dim=-1, keepdim=True) + self.eps))  # in place
        return up.to(dtype).mul_(self.weight)
