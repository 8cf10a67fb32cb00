"""A model of the q/k L2 normalisation inside flash-linear-attention's fused recurrent gated delta
rule kernel at ac16f54 ("[Gated DeltaNet] Fuse l2norm into kernels during inference"):
fla/ops/gated_delta_rule/fused_recurrent.py, fused_recurrent_gated_delta_rule_fwd_kernel, lines
76-83 (the decode path Qwen3-Next runs with use_qk_l2norm_in_kernel=True). Written here from reading
it, in PyTorch; only the normalisation is modelled, not the recurrence it feeds.

Per head vector (q or k, one token, one head):
  1. loaded and cast to float32;
  2. divided by sqrt(sum(v * v)) + 1e-6: float32, eps a literal added to the norm, outside the
     square root (the kernel takes no eps argument);
  3. the result stays in float32 registers (q is then scaled, k enters the state update): returned
     here as float32, as the kernel holds it.
Triton's fast sqrt and division are float32 approximations within an ulp or two; torch's IEEE ops
stand in for them.
"""
import torch


def qk_l2norm_in_kernel(x: torch.Tensor) -> torch.Tensor:
    b = x.float()                                                    # 1.
    return b / (torch.sqrt((b * b).sum(-1, keepdim=True)) + 1e-6)    # 2-3. eps outside, float32
