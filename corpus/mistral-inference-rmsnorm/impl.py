"""A model of the RMSNorm in mistralai/mistral-inference at 2557e12 (src/mistral_inference/
transformer_layers.py, lines 109-122), written here from reading it: RMSNorm(dim, eps=1e-6), an all-ones
weight; _norm multiplies by the rsqrt of (mean of squares + eps); forward runs it on a float32 copy,
casts back with type_as, then multiplies by the weight (the Llama cast). The transformer builds it with
args.norm_eps (1e-5 in Mistral 7B's params.json); the vision encoder's writes 1e-5 in."""
import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def _norm(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self._norm(x.float()).type_as(x)  # one rounding to the input dtype
        return out * self.weight  # then the weight in that dtype
