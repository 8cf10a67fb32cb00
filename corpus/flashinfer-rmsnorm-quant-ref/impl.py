"""A model of the reference FlashInfer's kernel test holds flashinfer.norm.rmsnorm_quant to, written
here from reading it: llama_rms_norm_quant in tests/utils/test_norm.py at fb28d72 (lines 37-48),
called by test_norm_quant (lines 138-166) with a Python float scale (0.01, 1.0 or 10.0).

Scale: the Python float made a tensor (float32, torch's default dtype) and its reciprocal taken in
float32.
Norm: the input upcast to float32; the mean of its squares over the row; the row times
rsqrt(mean + eps); that times the weight upcast to float32; that times the reciprocal scale. Every
step is float32 and nothing is rounded to the input dtype before the cast.
Quant: clamped to the FP8 type's finite range (E4M3FN: +-448) and cast to float8_e4m3fn (round to
nearest even).
The wrapper: normdiff gives the scale as a float32 tensor of one element; its value (exact in a
Python float) goes where the test's float goes; the scale is returned as it was given, the one
per-tensor scale of the q it returns."""
import torch


def rms_norm_quant_static(x, weight, scale, eps):
    # the scale's reciprocal: a float32 tensor from the Python number, inverted in float32
    inv_scale = torch.reciprocal(torch.tensor(float(scale.reshape(-1)[0]))).float()
    # float32 statistics and one chained float32 product: normalised, weighted, scaled
    h = x.float()
    variance = h.pow(2).mean(dim=-1, keepdim=True)
    h = h * torch.rsqrt(variance + eps)
    h = h * weight.float()
    h = h * inv_scale
    # saturate to E4M3FN's finite range, then the RNE cast
    fp8 = torch.finfo(torch.float8_e4m3fn)
    q = torch.clamp(h, fp8.min, fp8.max).to(torch.float8_e4m3fn)
    return q, scale
