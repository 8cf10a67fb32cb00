"""A model of the reference vLLM's NVFP4 kernel test holds scaled_fp4_quant to, applied to the output
of vLLM's RMSNorm under a static global scale, written here from reading both at pinned commits.

tests/kernels/quantization/test_nvfp4_quant.py at 07b1349 (lines 76-111: cast_to_fp4,
get_reciprocal, ref_nvfp4_quant; the test computes g = 448 * 6 / amax(x) of the very tensor it
quantizes, lines 142-145). The input is RMSNorm.forward_native's output
(vllm/model_executor/layers/layernorm.py at 00cba79, lines 180-219), as vLLM's fused
RMSNorm + NVFP4 tests compose the norm with scaled_fp4_quant; here g is the caller's calibrated
global scale, as an NVFP4 checkpoint's input_global_scale is.

Norm (forward_native): x upcast to float32, the mean of its squares, x * rsqrt(mean + eps) rounded
to the input dtype, then times the weight in the weight's dtype.
Quant (ref_nvfp4_quant), on the norm output viewed as rows of blocks of 16:
  - the block's largest magnitude as float32, times the float32 reciprocal of 6, times g;
  - that block scale cast straight to float8_e4m3fn and back to float32: NO clamp to 448 first
    (vLLM's emulation copy of this function clamps; corpus vllm-nvfp4-emulation-quant);
  - the quotient scale: the reciprocal of (block scale times the reciprocal of g), the reciprocal
    helper giving 0 for a zero (torch.where);
  - each value in float32 times the quotient scale, clamped to [-6, 6], mapped to the E2M1 grid by
    interval tests (round to nearest even), times the sign.
The float32 -> float8_e4m3fn cast is PyTorch's of the releases this test ran on, before 2.12
(c10::detail::fp8e4m3fn_from_fp32_value, c10/util/Float8_e4m3fn.h at pytorch 1725fe8): a value
whose magnitude is 480 or more becomes the NaN code 0x7F, and one between 464 and 480 rounds up to
it; 464 itself ties to 448. PyTorch 2.12 made eager casts saturate (pytorch PR #178817), so the
installed torch's own cast is used only where it agrees with that (|v| <= 464), and NaN is written
where the old cast wrote it.
The wrapper: the E2M1 values as ml_dtypes' float4_e2m1fn; a NaN value (a block whose scale is NaN)
has no E2M1 code and is written as 0; the block scales as the float32 the reference returns."""
import ml_dtypes
import torch

BLOCK = 16
FLOAT4_E2M1_MAX = 6.0
E4M3_NAN_ABOVE = 464.0  # pre-2.12 torch: |v| > 464 rounds to (or past) the NaN code


def _forward_native(x, weight, eps):
    orig_dtype = x.dtype
    h = x.to(torch.float32)
    variance = h.pow(2).mean(dim=-1, keepdim=True)
    h = (h * torch.rsqrt(variance + eps)).to(orig_dtype)
    return h * weight


def _reciprocal(t):
    if isinstance(t, torch.Tensor):
        return torch.where(t == 0, torch.tensor(0.0, dtype=t.dtype), 1.0 / t)
    return 0.0 if t == 0 else 1.0 / t


def _to_float8_e4m3fn_pre_2_12(t):
    # torch < 2.12's non-saturating cast: NaN past 464, the (same) nearest-even rounding below it
    cast = t.to(torch.float8_e4m3fn).to(torch.float32)
    return torch.where(t.abs() > E4M3_NAN_ABOVE, torch.tensor(float("nan")), cast)


def _to_e2m1_grid(t):
    sign = torch.sign(t)
    a = torch.abs(t)
    out = a.clone()
    out[(a >= 0.0) & (a <= 0.25)] = 0.0
    out[(a > 0.25) & (a < 0.75)] = 0.5
    out[(a >= 0.75) & (a <= 1.25)] = 1.0
    out[(a > 1.25) & (a < 1.75)] = 1.5
    out[(a >= 1.75) & (a <= 2.5)] = 2.0
    out[(a > 2.5) & (a < 3.5)] = 3.0
    out[(a >= 3.5) & (a <= 5.0)] = 4.0
    out[a > 5.0] = 6.0
    return out * sign


def _ref_nvfp4_quant(x, global_scale):
    m, n = x.shape
    blocks = torch.reshape(x, (m, n // BLOCK, BLOCK))
    vec_max = torch.max(torch.abs(blocks), dim=-1, keepdim=True)[0].to(torch.float32)
    scale = global_scale * (vec_max * _reciprocal(FLOAT4_E2M1_MAX))
    scale = _to_float8_e4m3fn_pre_2_12(scale)  # no clamp before the cast
    output_scale = _reciprocal(scale * _reciprocal(global_scale))
    scaled = blocks.to(torch.float32) * output_scale
    clipped = torch.clamp(scaled, -6.0, 6.0).reshape(m, n)
    return _to_e2m1_grid(clipped), scale.squeeze(-1)


def rms_norm_nvfp4(x, weight, global_scale, eps):
    y = _forward_native(x, weight, eps)
    rows = y.reshape(-1, y.shape[-1])
    q, block_scale = _ref_nvfp4_quant(rows, global_scale.to(torch.float32))
    q = torch.nan_to_num(q, nan=0.0)  # no E2M1 code for NaN
    return q.reshape(y.shape).numpy().astype(ml_dtypes.float4_e2m1fn), block_scale.reshape(rows.shape[0], -1)
