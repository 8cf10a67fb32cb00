"""A model of FlashInfer's NVFP4 reference quantizer in Transformer Engine's recipe, applied to the
LLaMA-style RMSNorm reference of FlashInfer's fused RMSNorm + FP4 test, written here from reading
both at fb28d72.

Norm (llama_rms_norm, tests/norm/test_rmsnorm_fp4_quant_cute_dsl.py lines 39-47): x upcast to
float32, the mean of its squares, x * rsqrt(mean + eps), times the weight upcast to float32, and
only then rounded to the input dtype: ONE rounding of y (vLLM's forward_native rounds twice).
Quant (tests/test_helpers/utils_fp4.py lines 54-65 and 96-203: cast_to_fp4,
nvfp4_global_encode_scale_te, nvfp4_global_decode_scale_te, ref_fp4_quant_te), given the tensor's
global amax A:
  - the global encode scale g = (448 * 6) / A in float32 (448 and 6 as float32 tensors), capped at
    float32's max, 1 where it is 0; the decode scale 1 / g in float32;
  - g times the float32 reciprocal of 6: the encode multiplier;
  - per block of 16: the largest magnitude as float32, times that multiplier, capped at float32's
    max, clamped to [-448, 448], cast to float8_e4m3fn (nearest even): the block's decode scale;
  - the block's encode scale 1 / (decode scale as float32 times the global decode scale), capped at
    float32's max (a zero decode scale gives 1 / 0 = inf, capped to float32's max);
  - each value in float32 times the encode scale, clamped to [-6, 6], mapped to the E2M1 grid by
    the interval tests of cast_to_fp4 (nearest even), times the sign.
It returns the E2M1 values and the E4M3 decode scales.
The wrapper: normdiff gives the global encode scale g (vLLM's and TensorRT-LLM's convention); this
reference takes the amax, so the wrapper passes A = 2688 / g (float64, then float32: exact for the
suite's NVFP4 scales, g = 672 and 42). The E2M1 values are returned as ml_dtypes' float4_e2m1fn,
the decode scales as the float8_e4m3fn tensor the reference returns."""
import ml_dtypes
import torch

BLOCK = 16
FLOAT4_E2M1_MAX = 6.0
F32_MAX = torch.finfo(torch.float32).max


def _llama_rms_norm(x, w, eps):
    orig_dtype = x.dtype
    h = x.float()
    variance = h.pow(2).mean(dim=-1, keepdim=True)
    h = h * torch.rsqrt(variance + eps)
    h = h * w.float()
    return h.to(orig_dtype)  # one rounding, after the weight


def _global_encode_scale(global_amax):
    global_amax = global_amax.to(torch.float32)
    e2m1_max = torch.tensor(6.0, dtype=torch.float32)
    e4m3_max = torch.tensor(448.0, dtype=torch.float32)
    g = torch.div(e4m3_max * e2m1_max, global_amax)
    g = torch.min(g, torch.tensor(F32_MAX, dtype=torch.float32))
    return torch.where(g == 0.0, torch.ones_like(g), g)


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


def _ref_fp4_quant_te(x, global_amax):
    m, n = x.shape
    x = x.view(m, n // BLOCK, BLOCK)
    vec_max = torch.amax(torch.abs(x), dim=-1, keepdim=True).to(torch.float32)
    e2m1_max = torch.tensor(FLOAT4_E2M1_MAX, dtype=torch.float32)
    e4m3_max = torch.tensor(448.0, dtype=torch.float32)
    g = _global_encode_scale(global_amax)
    g_decode = torch.div(1.0, g)
    multiplier = g * torch.reciprocal(e2m1_max)
    decode_scale = vec_max * multiplier
    decode_scale = torch.min(decode_scale, torch.tensor(F32_MAX, dtype=torch.float32))
    decode_scale = torch.clamp(decode_scale, min=-e4m3_max, max=e4m3_max)
    decode_scale = decode_scale.to(torch.float8_e4m3fn)
    encode_scale = torch.min(torch.div(1.0, decode_scale.to(torch.float32) * g_decode),
                             torch.tensor(F32_MAX, dtype=torch.float32))
    scaled = x.to(torch.float32) * encode_scale
    clipped = torch.clamp(scaled, -e2m1_max, e2m1_max).reshape(m, n)
    return _to_e2m1_grid(clipped), decode_scale.squeeze(-1)


def rms_norm_nvfp4(x, weight, global_scale, eps):
    y = _llama_rms_norm(x, weight, eps)
    rows = y.reshape(-1, y.shape[-1])
    global_amax = torch.tensor(2688.0 / float(global_scale.reshape(-1)[0]), dtype=torch.float32)
    q, decode_scale = _ref_fp4_quant_te(rows, global_amax)
    return q.reshape(y.shape).numpy().astype(ml_dtypes.float4_e2m1fn), decode_scale
