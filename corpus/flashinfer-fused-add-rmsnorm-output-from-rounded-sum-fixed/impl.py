"""A model of FlashInfer's FusedAddRMSNormKernel at c7dc921 (PR #587, "improve the precision of the
FusedAddRMSNormKernel function"): include/flashinfer/norm.cuh, lines 117-191, written here from
reading it, in PyTorch.

Per row:
  1. first pass: h = float(x) + float(residual) in float32, kept in shared memory; the sum of h * h
     accumulated in float32; h rounded to T and stored into `residual` (the residual output);
  2. rms_rcp = rsqrt(sum / d + eps), float32;
  3. second pass: y = h * rms_rcp * float(w) from the float32 h in shared memory, rounded once to T
     and stored into `input`.
The kernel writes both outputs into its input buffers; modelled out of place, returning (y,
residual_out) as vLLM's and SGLang's wrappers hand the two buffers back.
"""
import torch


def fused_add_rmsnorm(x, residual, weight, eps):
    dtype = x.dtype
    h = x.float() + residual.float()                                   # 1. float32 sum (shared memory)
    residual_out = h.to(dtype)                                         # 1. stored, rounded to T
    rms_rcp = torch.rsqrt((h * h).sum(-1, keepdim=True) / x.shape[-1] + eps)   # 2.
    y = (h * rms_rcp * weight.float()).to(dtype)                      # 3. from the float32 sum
    return y, residual_out
