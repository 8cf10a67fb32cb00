"""A model of OLMo's RMSLayerNorm.forward at 67c9e31 ("Removes low precision RMSNorm. Fixes high
precision RMSNorm."), olmo/model.py, written here from reading it, in PyTorch. The ModelConfig
argument is replaced by the width; the bias is off (the config's include_bias default).

forward: x converted to float32; the mean of its squares over the last axis; x times the reciprocal
square root of that mean plus eps; converted back to the input dtype; then the (float32) weight
times it, which promotes to float32 (the Llama cast).
"""
import torch
from torch import nn


class RMSLayerNorm(nn.Module):
    def __init__(self, size: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        og_dtype = x.dtype
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(og_dtype)
