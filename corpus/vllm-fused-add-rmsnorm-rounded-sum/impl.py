"""A model of vLLM's CUDA fused_add_rms_norm kernels at 0112cf2 (csrc/layernorm_kernels.cu: the
vectorized FP16/BF16 specialization and the generic kernel, lines 50-140), written here from
reading them, in PyTorch. The op works in place (input becomes y, residual becomes x + residual);
the model returns new tensors instead, (y, residual_out), as RMSNorm.forward_cuda hands them on.

First pass: input + residual is formed per element and *rounded to the input dtype* (the
half2/bfloat162 add of the vectorized path, the scalar_t add of the generic one), stored as the new
residual, and that rounded sum is what the float32 sum of squares reads (vLLM issue #52104: the
native path keeps the float32 sum for the statistic). s = rsqrt(sum / n + eps) in float32.
Second pass: the rounded sum times s in float32, rounded to the dtype, then times the weight in the
dtype (the Llama cast). For float32 input the rounding of the sum is the float32 add itself."""
import torch


def add_rms_norm(x, residual, weight, eps):
    n = x.shape[-1]
    h = (x.float() + residual.float()).to(x.dtype)  # the sum rounded to the input dtype first
    hf = h.float()
    s = torch.rsqrt((hf * hf).sum(dim=-1, keepdim=True) / n + eps)
    y = (hf * s).to(x.dtype) * weight  # Llama cast: round, then the weight in the dtype
    return y, h
