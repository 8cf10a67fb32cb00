"""A model of FlashInfer's FusedAddRMSNormKernel at fb28d72 (include/flashinfer/norm.cuh, lines
414-504), written here in PyTorch from reading it. Per element: x and residual widened to float32 and
added (float32), the sum squared into a float32 accumulator, the sum rounded to T and stored back into
`residual`, and the float32 sum kept in shared memory. The accumulators are reduced across a warp by
xor butterfly and then across warps (here torch's float32 sum: the same float32 reduction in another
order). rms_rcp = rsqrt(sum / d + eps); each output is the float32 sum * rms_rcp * (weight_bias +
float(w)) rounded to T and stored into `input` (weight_bias is 0 for fused_add_rmsnorm, 1 for the Gemma
variant). The kernel writes both results in place; this model returns them as (y, residual_out)."""
import torch


def fused_add_rmsnorm(x, residual, weight, eps=1e-6, weight_bias=0.0):
    h = x.float() + residual.float()  # float32 sum, never rounded before the statistic
    residual_out = h.to(x.dtype)  # stored back rounded to T
    rms_rcp = torch.rsqrt((h * h).sum(dim=-1, keepdim=True) / h.shape[-1] + eps)
    y = h * rms_rcp * (weight_bias + weight.float())  # float32, left to right
    return y.to(x.dtype), residual_out
