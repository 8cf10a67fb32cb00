"""A model of SGLang's Triton per-token-group FP8 quantizer (python/sglang/srt/layers/quantization/
fp8_kernel.py at 008601f: the row-major kernel _per_token_group_quant_8bit and its wrapper
_per_token_group_quant_8bit_raw), written here from reading it, applied per token (one group per
row) to a float32 RMSNorm output, as SGLang PR #30900 fixed it.

The wrapper picks the 8-bit range: on ROCm it hardcoded 224 (the FNUZ max vLLM and SGLang use on
gfx942) for every FP8 output, including gfx950, whose FP8 is E4M3FN with a max of 448; the fix takes
the max of the platform's own FP8 type. This model uses 448, E4M3FN's max (the fix).

Norm (the quantizer's input): x upcast to float32, x * rsqrt(mean(x^2) + eps) * weight in float32,
not rounded. Quant (the kernel): the row is loaded as float32; its amax is floored at eps = 1e-10
(the wrapper's default); the scale is that amax over the 8-bit max; the kernel takes the scale's
reciprocal in float32, multiplies each element by it, clamps to [-max, max] and casts to
float8_e4m3fn (round to nearest even)."""
import torch

BIT8_MAX = 448.0  # torch.finfo(torch.float8_e4m3fn).max
EPS_ABSMAX = 1e-10


def rms_norm_quant(x, weight, eps):
    # the norm output the quantizer reads, in float32
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.float()
    y2 = y.reshape(-1, y.shape[-1])
    # per group (here the whole row): amax floored at eps, over the 8-bit max
    absmax = torch.clamp(y2.abs().amax(dim=-1, keepdim=True), min=EPS_ABSMAX)
    y_s = absmax / BIT8_MAX
    # reciprocal multiply, clamp to the chosen range, RNE cast to E4M3FN
    y_s_inv = 1.0 / y_s
    q = torch.clamp(y2 * y_s_inv, -BIT8_MAX, BIT8_MAX).to(torch.float8_e4m3fn)
    return q.reshape(y.shape), y_s
