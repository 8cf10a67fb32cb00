"""A model of the reference FlashInfer's kernel test holds flashinfer.norm.fused_add_rmsnorm_quant
to, written here from reading it: fused_add_rms_norm_quant in tests/utils/test_norm.py at fb28d72
(lines 95-108), called by test_fused_add_rmsnorm_quant (lines 234-276) with a Python float scale.

Scale: the Python float made a float32 tensor and its reciprocal taken in float32.
Add: input and residual each upcast to float32 and summed in float32; the residual written back is
that sum rounded to the input dtype, while the norm reads the float32 sum.
Norm: the mean of squares of the sum, the sum times rsqrt(mean + eps), times the weight upcast to
float32, times the reciprocal scale: float32 throughout.
Quant: clamped to E4M3FN's finite range (+-448), cast to float8_e4m3fn (round to nearest even).
The reference returns (q, residual); the wrapper returns (q, scale, residual), the scale as given."""
import torch


def add_rms_norm_quant_static(x, residual, weight, scale, eps):
    inv_scale = torch.reciprocal(torch.tensor(float(scale.reshape(-1)[0]))).float()
    orig_dtype = x.dtype
    # the add in float32; the written-back residual is the sum in the input dtype
    h = x.to(torch.float32) + residual.to(torch.float32)
    residual_out = h.to(orig_dtype)
    # float32 statistics of the unrounded sum, one chained float32 product
    variance = h.pow(2).mean(dim=-1, keepdim=True)
    h = h * torch.rsqrt(variance + eps)
    h = h * weight.float()
    h = h * inv_scale
    fp8 = torch.finfo(torch.float8_e4m3fn)
    q = torch.clamp(h, fp8.min, fp8.max).to(torch.float8_e4m3fn)
    return q, scale, residual_out
