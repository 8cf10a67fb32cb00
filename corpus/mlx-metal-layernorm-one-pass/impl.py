"""A model of MLX's Metal LayerNorm kernel at 24f8917 (mlx/backend/metal/kernels/layer_norm.metal,
layer_norm_single_row, lines 12-105, the parent of PR #2246; layer_norm_looped, for wide rows, has
the same arithmetic), written here from reading it, in PyTorch.

One pass over the row: each element is read as float32 and both sum(x) and sum(x^2) are
accumulated in float32 (SIMD-group sums, then across groups); mean = sum(x) / n and
variance = sum(x^2) / n - mean^2 (the one-pass variance, the bug of MLX issue #2238: NaN rows on
the GPU at mean ~1450), normalizer = rsqrt(variance + eps). Output: (x - mean) * normalizer in
float32, cast to the input dtype, multiplied by the weight in that dtype, plus the bias in that
dtype (three roundings in bf16/fp16)."""
import torch


def layer_norm(x, weight, bias, eps):
    n = x.shape[-1]
    xf = x.float()
    sumx = xf.sum(dim=-1, keepdim=True)
    sumx2 = (xf * xf).sum(dim=-1, keepdim=True)
    mean = sumx / n
    variance = sumx2 / n - mean * mean  # can cancel to zero or go negative
    normalizer = torch.rsqrt(variance + eps)
    t = ((xf - mean) * normalizer).to(x.dtype)
    return weight * t + bias  # in the input dtype
