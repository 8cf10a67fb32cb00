"""A model of OLMo's RMSLayerNorm (olmo/model.py lines 211-257 at the parent of 67c9e31), its
default high-precision path, written here from reading it, in PyTorch. The ModelConfig argument is
replaced by the width; the bias is off (the config's include_bias default).

rms_norm: the L2 norm of x over the last axis, in x's dtype; its reciprocal square root after eps is
added to the norm (outside any root of a mean); the float32 weight times that per-row value is
returned: x itself is not used again (issue #281; rewritten by 67c9e31). The weight (float32)
promotes the product to float32.
"""
import torch
from torch import nn


class RMSLayerNorm(nn.Module):
    def __init__(self, size: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        norm_x = x.norm(2, dim=-1, keepdim=True)
        x_normed = torch.rsqrt(norm_x + self.eps)    # a per-row value; x is not multiplied
        return self.weight * x_normed
