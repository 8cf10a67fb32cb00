"""A model of FlashInfer's FusedAddRMSNormKernel at d7300c4 (include/flashinfer/norm.cuh, lines
117-192), written here from reading it, in PyTorch.

Per row:
  1. first pass: h = float(x) + float(residual) in float32; the sum of h * h accumulated in float32
     (per-thread partial sums, then warp shuffles and a cross-warp reduction); h rounded to T and
     stored into `residual` (the residual output);
  2. rms_rcp = rsqrt(sum / d + eps), float32;
  3. second pass: the residual output is read back, so the normalised value is built from the
     rounded sum T(h), not from the float32 h the statistic used: y = float(T(h)) * rms_rcp *
     float(w), in float32, rounded once to T and stored into `input`.
PR #587 kept the float32 h in shared memory for the second pass.

The kernel writes both outputs into its input buffers; modelled out of place, returning (y,
residual_out) as vLLM's and SGLang's wrappers hand the two buffers back.
"""
import torch


def fused_add_rmsnorm(x, residual, weight, eps):
    dtype = x.dtype
    h = x.float() + residual.float()                                   # 1. float32 sum
    residual_out = h.to(dtype)                                         # 1. stored, rounded to T
    rms_rcp = torch.rsqrt((h * h).sum(-1, keepdim=True) / x.shape[-1] + eps)   # 2. from float32 h
    y = (residual_out.float() * rms_rcp * weight.float()).to(dtype)   # 3. from the rounded sum
    return y, residual_out
