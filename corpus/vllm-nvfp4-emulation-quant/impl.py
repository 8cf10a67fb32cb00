"""A model of vLLM's NVFP4 emulation of an activation quantized under the checkpoint's static global
scale, applied to the output of vLLM's RMSNorm, written here from reading both at pinned commits.

vllm/model_executor/layers/quantization/utils/nvfp4_emulation_utils.py at 055e47c (lines 390-448):
run_nvfp4_emulations quantizes the linear layer's input x with the layer's input_global_scale (the
encode scale g = 448 * 6 / amax, calibrated once) through ref_nvfp4_quant_dequant, which off CUDA
calls the PyTorch ref_nvfp4_quant modelled here (on CUDA a Triton kernel with the same order:
clamp, E4M3 cast, g / scale). That x is the output of RMSNorm.forward_native
(vllm/model_executor/layers/layernorm.py at 00cba79, lines 180-219) where the norm runs natively.

Norm (forward_native): x upcast to float32, the mean of its squares, x * rsqrt(mean + eps) rounded
to the input dtype, then times the weight in the weight's dtype (a second rounding).
Quant (ref_nvfp4_quant), on the norm output viewed as rows of blocks of 16:
  - the block's largest magnitude, as float32;
  - times the float32 reciprocal of 6 (E2M1's max), then times g: the block scale in float32;
  - clamped to [-448, 448] (E4M3FN's finite range), cast to float8_e4m3fn (nearest even) and back
    to float32;
  - the quotient scale: the reciprocal of (block scale times the reciprocal of g), where the
    reciprocal helper adds 1e8 to a zero before dividing (a zero block scale gives 1e-8, not inf);
  - each value, in float32, times the quotient scale, clamped to [-6, 6];
  - cast_to_fp4: the magnitude mapped to the E2M1 grid by interval tests whose closed ends send
    each tie to the even neighbour (0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2,
    3.5 -> 4, 5 -> 4), times the sign: round to nearest even.
It returns the E2M1 values and the decoded block scales, both float32.
The wrapper: the E2M1 values as ml_dtypes' float4_e2m1fn (exact: they are E2M1 values already),
the block scales as the float32 ref_nvfp4_quant returns, shaped (rows, blocks)."""
import ml_dtypes
import torch

BLOCK = 16
FLOAT4_E2M1_MAX = 6.0
FLOAT4_E2M1_MAX_RECIPROCAL = 1 / FLOAT4_E2M1_MAX


def _forward_native(x, weight, eps):
    orig_dtype = x.dtype
    h = x.to(torch.float32)
    variance = h.pow(2).mean(dim=-1, keepdim=True)
    h = (h * torch.rsqrt(variance + eps)).to(orig_dtype)  # rounded to the input dtype
    return h * weight  # the weight multiply in the input dtype


def _reciprocal(t):
    # a zero is moved to 1e8 before dividing (graph-capture safe; no torch.where)
    return 1.0 / (t + (t == 0) * 1e8)


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


def _nvfp4_quant(x, global_scale):
    m, n = x.shape
    blocks = torch.reshape(x, (m, n // BLOCK, BLOCK))
    vec_max = torch.max(torch.abs(blocks), dim=-1, keepdim=True)[0].to(torch.float32)
    scale = global_scale * (vec_max * FLOAT4_E2M1_MAX_RECIPROCAL)
    scale = torch.clamp(scale, min=-448, max=448)  # saturate before the E4M3 cast
    scale = scale.to(torch.float8_e4m3fn).to(torch.float32)
    output_scale = _reciprocal(scale * _reciprocal(global_scale))
    scaled = blocks.to(torch.float32) * output_scale
    clipped = torch.clamp(scaled, -6.0, 6.0).reshape(m, n)
    return _to_e2m1_grid(clipped), scale.squeeze(-1)


def rms_norm_nvfp4(x, weight, global_scale, eps):
    y = _forward_native(x, weight, eps)
    rows = y.reshape(-1, y.shape[-1])
    q, block_scale = _nvfp4_quant(rows, global_scale.to(torch.float32))
    q = q.reshape(y.shape).numpy().astype(ml_dtypes.float4_e2m1fn)
    return q, block_scale.reshape(rows.shape[0], -1)
