"""A model of nanoGPT's LayerNorm at 3adf61e (karpathy/nanoGPT model.py, lines 18-27), written here from
reading it: a module LayerNorm(ndim, bias) holding an all-ones weight and, only when `bias` is true, a
zero bias (PyTorch's LayerNorm had no bias=False then); forward is F.layer_norm over the weight's shape
with the eps written in as the literal 1e-5. It takes no eps argument."""
import torch
import torch.nn.functional as F
from torch import nn


class LayerNorm(nn.Module):
    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, input):
        # normalised shape taken from the weight, eps a constant
        return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)
