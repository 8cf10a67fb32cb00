"""A model of LeetCUDA's LayerNorm kernels at 7aa190c (kernels/layer-norm/layer_norm.cu, the parent
of the fix): layer_norm_f32_kernel (lines 54-78) for float32 input and layer_norm_f16_f32_kernel
(lines 327-353) for float16 input, written here from reading them, in PyTorch.

One thread block per row (the kernels need the width to equal the block's thread count): the row
sum is reduced in float32 (a warp-shuffle tree, then across warps) and divided by K for the mean;
the squared deviations from that mean are reduced the same way; then the bug (LeetCUDA issue #309,
fixed by PR #317): eps is added to K instead of to the variance, so the scale is
rsqrt(sum((x - mean)^2) / (K + eps)), eps = 1e-5 written into the kernel. y = (x - mean) * scale *
g + b in float32 (the float16 kernel fuses the last multiply-add into one fma, then rounds to half).

The kernels take one scalar g and one scalar b; the model applies the case's per-channel weight and
bias elementwise with the same arithmetic per element. The repository has no bfloat16 LayerNorm
kernel: bfloat16 input is run through the float32 kernel and rounded back."""
import torch

EPSILON = 1e-5  # a constant in every kernel: the call has no eps


def _block_sum(v):
    # a float32 tree reduction over the row (warp shuffles, then the warps' partial sums); torch's
    # float32 sum stands in for its order
    return v.sum(dim=-1, keepdim=True, dtype=torch.float32)


def layer_norm(x, weight, bias):
    k = x.shape[-1]
    value = x.float()
    mean = _block_sum(value) / k
    d = value - mean
    var_sum = _block_sum(d * d)
    scale = torch.rsqrt(var_sum / (float(k) + EPSILON))  # eps lands on K
    g = weight.float()
    b = bias.float()
    if x.dtype == torch.float16:
        y = torch.addcmul(b, d * scale, g)  # the fma of the half kernel: one rounding in float32
        return y.to(torch.float16)
    y = (d * scale) * g + b
    return y.to(x.dtype)
