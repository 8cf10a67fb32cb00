"""MLX's Metal LayerNorm kernel as PR #2246 (commit 2e8cf0b) makes it two-pass
(mlx/backend/metal/kernels/layer_norm.metal, layer_norm_single_row, lines 45-125), modelled in
PyTorch: the row is read as float32, its mean summed in float32 first; then the deviations x - mean
are squared and summed in float32, normalizer = rsqrt(sum / n + eps). Output as before:
(x - mean) * normalizer in float32, cast to the input dtype, times the weight, plus the bias, both
in the input dtype."""
import torch


def layer_norm(x, weight, bias, eps):
    n = x.shape[-1]
    xf = x.float()
    mean = xf.sum(dim=-1, keepdim=True) / n
    d = xf - mean
    normalizer = torch.rsqrt((d * d).sum(dim=-1, keepdim=True) / n + eps)
    t = (d * normalizer).to(x.dtype)
    return weight * t + bias
