"""A model of vLLM's rms_norm_dynamic_per_token_quant to INT8, written here from reading its test
reference and its fused kernel. The norm is the test's reference, RMSNorm.forward_native
(tests/kernels/core/test_fused_quant_layernorm.py at 0a88d96, lines 49-96); the quantizer is the
pure-PyTorch ref_dynamic_per_token_quant's INT8 branch (tests/kernels/quant_utils.py at f011f1c,
lines 22-69), with the one step that reference leaves out taken from the fused kernel
(csrc/quantization/fused_kernels/layernorm_utils.cuh at 83e16d2, compute_dynamic_per_token_scales
and norm_and_quant): the kernel floors every scale at min_scaling_factor, which for an int8 output
is float32's machine epsilon; the pure-torch reference has no floor at all, so a zero row there
gives 0 * inf = NaN before the int8 cast.

Norm: float32 statistics, x * rsqrt(mean + eps) rounded to the input dtype, then times the weight in
that dtype. Quant: the row's float32 amax over 127 is the scale, floored at FLT_EPSILON (the
kernel's floor); the reciprocal of the scale is taken in float32 and each element is multiplied by
it (the kernel inverts the per-token scale for int8, unlike FP8), rounded to nearest with ties to
even (torch.round; the kernel's cvt.rni), clamped to [-128, 127] and cast to int8."""
import torch

INT8_MAX = 127.0
FLT_EPSILON = float(torch.finfo(torch.float32).eps)


def rms_norm_quant(x, weight, eps):
    orig = x.dtype
    # forward_native: float32 statistics, rounded to the input dtype, weight in that dtype
    xf = x.float()
    var = xf.pow(2).mean(dim=-1, keepdim=True)
    y = (xf * torch.rsqrt(var + eps)).to(orig) * weight
    y2 = y.reshape(-1, y.shape[-1])
    # per-token scale: float32 amax over 127, floored at FLT_EPSILON as the fused kernel does
    amax = y2.abs().max(dim=-1).values.float()
    scales = (amax / torch.tensor(INT8_MAX, dtype=torch.float32))[:, None]
    scales = scales.clamp(min=FLT_EPSILON)
    # the reciprocal of the scale in float32, then a multiply, round half to even, saturate
    iscales = torch.tensor(1.0, dtype=torch.float32) / scales
    q = (y2.float() * iscales).round().clamp(-128, 127).to(torch.int8)
    return q.reshape(y.shape), scales
