"""A model of TileLang's RMSNorm example kernel at 468b1b7 (PR #1243, "RMSNorm epsilon refine in the
example"): examples/norm/rms_norm.py, the one-block `rms_norm` kernel, lines 36-59, written here
from reading it, in PyTorch.

The kernel works on float32 tensors only; the model converts other dtypes to float32 and back, as a
caller would. Per row: the squares and their block sum in float32; the sum divided by the width, the
literal 1e-12 added to that mean, and the reciprocal square root taken of the total (eps inside the
root since PR #1243); each element multiplied by it. No weight.
"""
import torch


def rms_norm(x):
    in_dtype = x.dtype
    a = x.to(torch.float32)
    mean_sq = (a * a).sum(dim=-1, keepdim=True) / a.shape[-1]
    return (a * torch.rsqrt(mean_sq + 1e-12)).to(in_dtype)
