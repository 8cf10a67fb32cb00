"""A model of the reference SGLang's kernel test holds sgl_kernel.fused_add_rmsnorm_quant_fp8 to,
written here from reading it: reference_fused_add_rmsnorm_quant_fp8 in
sgl-kernel/tests/test_fused_add_rmsnorm_quant_fp8.py at b46b1c7 (lines 27-56). It returns
(residual_out, q, scale); the model returns (q, scale, residual_out), the add_rms_norm_quant order.

Add: input and residual are each upcast to float32 and summed in float32; residual_out is that sum
rounded to the input dtype, but the norm reads the unrounded float32 sum.
Norm: the mean of squares of the float32 sum, rsqrt(mean + eps), the sum times that times the
weight upcast to float32: y stays float32, never rounded to the input dtype.
Quant: the row's float32 amax of y over 448 (E4M3FN's max) is the scale, with no floor; its inverse
is 0 where the scale is 0 (a zero row) and 1 / scale elsewhere; each element times the inverse,
clamped to [-448, 448], cast to float8_e4m3fn (round to nearest even)."""
import torch

FP8_MAX = float(torch.finfo(torch.float8_e4m3fn).max)


def add_rms_norm_quant(x, residual, weight, eps):
    # the residual add in float32; the written-back residual rounded to the input dtype
    h = x.float() + residual.float()
    residual_out = h.to(x.dtype)
    # RMSNorm on the float32 sum, weight upcast to float32, y kept in float32
    variance = h.pow(2).mean(dim=-1, keepdim=True)
    norm = h * torch.rsqrt(variance + eps) * weight.float()
    # per-token scale amax / 448, no floor; inverse 0 for a zero scale
    abs_max = norm.abs().amax(dim=-1, keepdim=True)
    scale = abs_max / FP8_MAX
    scale_inv = torch.where(scale == 0, torch.zeros_like(scale), 1.0 / scale)
    # reciprocal multiply, saturate, RNE cast
    q = (norm * scale_inv).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q, scale.reshape(-1, 1), residual_out
