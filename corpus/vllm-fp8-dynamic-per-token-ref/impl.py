"""A model of the reference vLLM's kernel test holds rms_norm_dynamic_per_token_quant to, written here
from reading it: tests/kernels/core/test_fused_quant_layernorm.py at 0a88d96 (ref_rms_norm and
ref_dynamic_per_token_or_block_quant, lines 49-96) runs RMSNorm.forward_native and hands its output
to the per-token FP8 quantizer; the quantizer's arithmetic is modelled on the pure-PyTorch
ref_dynamic_per_token_quant in tests/kernels/quant_utils.py at f011f1c (lines 22-69, its FP8
branch), which the test used before it switched to the library op and which mirrors the kernel's
order of operations step for step.

Norm (forward_native): the input is upcast to float32, the mean of squares is taken in float32, x
times rsqrt(mean + eps) is rounded back to the input dtype, and that rounded value is multiplied by
the weight in the weight's dtype (the input dtype in the test).
Quant: the row's largest magnitude of that output, in float32, divided by 448 (E4M3FN's max) is the
row's scale, floored at 1 / (448 * 512); each element, in float32, is divided by its row's scale
(a division, not a reciprocal multiply), clamped to [-448, 448] and cast to float8_e4m3fn
(round to nearest even)."""
import torch

FP8_MAX = 448.0


def rms_norm_quant(x, weight, eps):
    orig = x.dtype
    # forward_native: float32 statistics, the normalised value rounded to the input dtype,
    # then the weight multiply in the weight's dtype
    xf = x.float()
    var = xf.pow(2).mean(dim=-1, keepdim=True)
    y = (xf * torch.rsqrt(var + eps)).to(orig) * weight
    y2 = y.reshape(-1, y.shape[-1])
    # per-token scale: float32 row amax over the FP8 max, floored at 1 / (max * 512)
    amax = y2.abs().max(dim=-1).values.float()
    scales = (amax / torch.tensor(FP8_MAX, dtype=torch.float32))[:, None]
    min_scale = torch.tensor(1.0, dtype=torch.float32) / (torch.tensor(FP8_MAX) * 512.0)
    scales = scales.clamp(min=min_scale)
    # quotient by division, saturated to the format's range before the RNE cast
    q = (y2.float() / scales).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q.reshape(y.shape), scales
