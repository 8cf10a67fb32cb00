"""A model of DeepSeek-V3's block FP8 activation quantizer applied to the output of its RMSNorm, at
b15f0db (PR #964, "support scale_fmt=ue8m0"), written here from reading it. That commit wrote the amax
floor as a cap; it was fixed in PR #969 (9b4e978).

inference/model.py L270-L294: the model's RMSNorm is one call of torch.nn.functional.rms_norm over the
last axis with its weight and eps, in the activation dtype (bf16 in generate.py), so the quantizer
sees the norm output rounded to that dtype. model.py L131-L159: `linear` passes that activation to
`act_quant` before the FP8 GEMM.

inference/kernel.py L9-L57 at b15f0db (act_quant_kernel / act_quant):
  - one Triton program per 128 consecutive elements of the flattened tensor (the last dimension must
    be a multiple of 128, so blocks are 128 columns of one row); the values are loaded and widened to
    float32;
  - the block's largest magnitude is taken, then passed through a minimum with 1e-4 (L27): meant
    as a floor, it caps every amax at 1e-4, so every scale is at most 1e-4 / 448;
  - the scale is that amax divided by 448 in float32 (L28); with scale_fmt "ue8m0" it is replaced by
    2 to the power of the ceiling of its log2 (L29-L31);
  - each value is divided by the scale (a division, not a reciprocal multiply, L32) and cast to the
    output's float8_e4m3fn (L33); the kernel has no explicit clamp: Triton's float32 -> fp8e4nv cast
    on NVIDIA is the PTX cvt.rn.satfinite (round to nearest even, saturating at 448), modelled here
    as a clamp to +-448 then torch's RNE cast;
  - the float32 scales are stored one per block, shaped (*x.shape[:-1], K / 128) (L54).
"""
import torch
import torch.nn.functional as F

BLOCK = 128
FP8_MAX = 448.0
AMAX_FLOOR = 1e-4
SCALE_FMT = None  # None: float32 scales (V3); "ue8m0": power-of-two scales (V3.1)


def _act_quant(x: torch.Tensor, scale_fmt=None, cap=False):
    rows = x.reshape(-1, x.shape[-1])
    blocks = rows.to(torch.float32).reshape(rows.shape[0], -1, BLOCK)  # loaded, widened to float32
    amax = blocks.abs().amax(-1, keepdim=True)  # the block's largest magnitude
    if cap:
        amax = torch.clamp_max(amax, AMAX_FLOOR)  # PR #964's line: a min, so amax is at most 1e-4
    else:
        amax = torch.clamp_min(amax, AMAX_FLOOR)  # raised to at least 1e-4
    s = amax / FP8_MAX  # float32 division by 448
    if scale_fmt == "ue8m0":
        s = torch.exp2(torch.ceil(torch.log2(s)))  # rounded up to a power of two
    q = (blocks / s).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)  # saturating RNE cast
    return q.reshape(x.shape), s.reshape(*x.shape[:-1], -1)


def rms_norm_act_quant(x, weight, eps):
    # the model's RMSNorm: torch's fused rms_norm in the activation dtype (bf16 stays bf16)
    y = F.rms_norm(x, (x.shape[-1],), weight.to(x.dtype), eps)
    return _act_quant(y, SCALE_FMT, cap=True)  # the min of PR #964
