"""A model of the reference SGLang's kernel test holds sgl_kernel.rms_norm_static_fp8_quant to,
written here from reading it: scaled_fp8_conversion_ref and rms_norm_static_fp8_quant_ref in
sgl-kernel/tests/test_layernorm_quant_kernels.py at 9da4118 (lines 19-56), run by
test_rms_norm_static_fp8_quant on CUDA with a float32 scale tensor of one element.

Norm, every step in the input's dtype unless said:
  - the squares of the input, in the input dtype (rounded to bf16 / fp16), then upcast to float32
    and averaged over the row in float32;
  - rsqrt(mean + eps) in float32, then ROUNDED TO THE INPUT DTYPE (inv_rms);
  - the input times that rounded inv_rms, in the input dtype (one rounding);
  - times the weight, in the input dtype (another rounding).
Quant (scaled_fp8_conversion_ref):
  - the reciprocal of the squeezed scale, a 0-dim float32 tensor;
  - the norm output times it. The result's dtype is the input dtype (a 0-dim tensor does not
    promote); on CUDA, where the test runs, the multiply kernel reads the 0-dim float32 operand
    as that dtype, so the reciprocal is rounded to bf16 / fp16 first, the product is taken in
    float32 and ROUNDED TO THE INPUT DTYPE (modelled explicitly: on the CPU torch would keep the
    scalar in float32);
  - clamped to [-448, 448] in the input dtype, then cast to float8_e4m3fn (nearest even, from the
    bf16 / fp16 value: a second rounding of the quotient).
For float32 input every step is float32.
The wrapper: the reference writes into a preallocated float8 tensor; here q is returned with the
scale as it was given."""
import torch

FP8_E4M3_MAX = 448.0


def _scaled_fp8_conversion(val, scale, fp8_dtype):
    quant_scale = 1.0 / scale  # 0-dim float32
    # CUDA's multiply reads the 0-dim float32 operand as val's dtype; the product is val's dtype
    x = val * quant_scale.to(val.dtype)
    r = torch.clamp(x, min=-FP8_E4M3_MAX, max=FP8_E4M3_MAX)
    return r.to(fp8_dtype)


def rms_norm_static_fp8_quant(input, weight, scale, epsilon):
    # squares in the input dtype, averaged in float32
    variance = (input.pow(2)).to(torch.float32).mean(dim=-1, keepdim=True)
    # the inverse rms rounded to the input dtype, then two products in the input dtype
    inv_rms = torch.rsqrt(variance + epsilon).to(input.dtype)
    normalized_input = input * inv_rms
    out_norm = normalized_input * weight
    q = _scaled_fp8_conversion(out_norm, scale.squeeze(), torch.float8_e4m3fn)
    return q, scale
