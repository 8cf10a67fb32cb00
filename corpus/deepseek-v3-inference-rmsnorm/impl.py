"""A model of the RMSNorm in deepseek-ai/DeepSeek-V3's inference code at 9b4e978 (inference/model.py,
lines 270-294), written here from reading it: RMSNorm(dim, eps=1e-6) keeps `dim` and an all-ones weight
(created in bf16, the default dtype generate.py sets), and forward is one call of
torch.nn.functional.rms_norm over the last axis of size dim with that weight and eps. The model builds
every norm with the default eps (attn_norm, ffn_norm, and MLA's q_norm / kv_norm on the 1536- and
512-wide latents)."""
import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.dim = dim
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor):
        return F.rms_norm(x, (self.dim,), self.weight, self.eps)  # torch's fused RMSNorm
