"""A model of the RMSNorm in google/gemma_pytorch at 014acb7 (gemma/model.py, lines 166-190), written
here from reading it. Constructor RMSNorm(dim, eps=1e-6, add_unit_offset=True), weight initialised to
zeros. The input is upcast to float32 and scaled by the rsqrt of (mean of squares + eps); with the unit
offset (Gemma's default) it is multiplied by 1 + the float32 weight, otherwise by the float32 weight;
the product is cast back to x's dtype once (the source notes this is Gemma 2's order, unlike Llama's)."""
import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6, add_unit_offset: bool = True):
        super().__init__()
        self.eps = eps
        self.add_unit_offset = add_unit_offset
        self.weight = nn.Parameter(torch.zeros(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        y = self._norm(x.float())
        # zero-centred storage: the scale is 1 + w, both in float32
        y = y * (1 + self.weight.float()) if self.add_unit_offset else y * self.weight.float()
        return y.type_as(x)  # a single rounding at the end
