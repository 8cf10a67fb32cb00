"""A model of the RMSNorm in meta-llama/llama's reference model.py at 689c7f2 (llama/model.py, lines
34-77), written here from reading it. Constructor RMSNorm(dim, eps=1e-6) with an all-ones weight (the
model builds it with ModelArgs.norm_eps, 1e-5). The private _norm multiplies its input by the rsqrt of
the mean of squares plus eps; forward runs it on a float32 copy, casts the result back to x's dtype,
and only then multiplies by the weight (the order later called the Llama cast)."""
import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def _norm(self, x):
        # scale by the reciprocal root of (mean of squares over the last axis + eps)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        # float32 in, cast back to the input dtype, weight applied in that dtype
        out = self._norm(x.float()).type_as(x)
        return out * self.weight
