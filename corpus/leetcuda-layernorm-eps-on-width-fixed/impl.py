"""LeetCUDA's LayerNorm kernels as PR #317 (commit 7b8f319) fixes them (kernels/layer-norm/
layer_norm.cu: layer_norm_f32_kernel, lines 54-78, and layer_norm_f16_f32_kernel, lines 327-353),
modelled in PyTorch: the same float32 block reductions for the mean and the squared deviations,
and eps now added to the variance: scale = rsqrt(sum((x - mean)^2) / K + eps), eps = 1e-5 written
into the kernel. y = (x - mean) * scale * g + b in float32 (one fma, then a rounding to half, in the
float16 kernel). The kernels take scalar g and b; the model applies the case's per-channel weight
and bias elementwise. bfloat16 input goes through the float32 kernel (the repository has no
bfloat16 LayerNorm kernel)."""
import torch

EPSILON = 1e-5  # a constant in every kernel: the call has no eps


def _block_sum(v):
    return v.sum(dim=-1, keepdim=True, dtype=torch.float32)


def layer_norm(x, weight, bias):
    k = x.shape[-1]
    value = x.float()
    mean = _block_sum(value) / k
    d = value - mean
    var_sum = _block_sum(d * d)
    scale = torch.rsqrt(var_sum / float(k) + EPSILON)  # eps on the variance
    g = weight.float()
    b = bias.float()
    if x.dtype == torch.float16:
        y = torch.addcmul(b, d * scale, g)
        return y.to(torch.float16)
    y = (d * scale) * g + b
    return y.to(x.dtype)
