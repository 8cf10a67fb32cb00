"""Unsloth's Gemma RMSNorm on its training path at fedcafe, written here from reading it, in PyTorch:
  - unsloth/models/gemma.py lines 355-364: after loading, every GemmaRMSNorm weight gets
    `module.weight += 1.0`, in place, in the model's dtype (bf16(1 + w) for a bf16 model);
  - lines 95 and 111: the decoder layer runs fast_rms_layernorm, i.e.
    unsloth/kernels/rms_layernorm.py, the Triton kernel _rms_layernorm_forward (lines 21-52):
    x loaded and cast to float32, the mean of x * x in float32, rsqrt(mean + eps), x * rsqrt cast to
    the weight's dtype ("Exact copy from HF": Llama's cast), times the weight in that dtype,
    stored in the input dtype.
So the scale is the folded bf16(1 + w) and the normalised value is rounded before the multiply.
Fixed by PR #223 ("Fix Gemma"): a Gemma kernel doing all of it in float32 with w + 1.0 inside.
The float32 sum is a tree reduction on the GPU; torch's CPU sum stands in for it.
"""
import torch
from torch import nn


class GemmaRMSNormUnsloth(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(hidden_size))   # Gemma's stored, zero-centred weight
        self.variance_epsilon = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        folded = self.weight.detach() + 1.0                      # weight += 1.0, in the weight's dtype
        xf = x.float()
        inv_var = torch.rsqrt((xf * xf).sum(-1, keepdim=True) / x.shape[-1] + self.variance_epsilon)
        normed = (xf * inv_var).to(folded.dtype)                 # cast to the weight's dtype
        return (normed * folded).to(x.dtype)                     # multiply in that dtype, store
