"""A model of the q/k L2 normalisation inside flash-linear-attention's fused recurrent gated delta
rule kernel at 25493c5 ("[Norm] Unify eps behaviors across kernels"):
fla/ops/gated_delta_rule/fused_recurrent.py, fused_recurrent_gated_delta_rule_fwd_kernel, lines
90-95. Written here from reading it, in PyTorch; only the normalisation is modelled.

Per head vector (q or k, one token, one head):
  1. loaded and cast to float32;
  2. divided by sqrt(sum(v * v) + 1e-6): float32, the literal eps inside the square root;
  3. kept in float32 (returned as float32, as the kernel holds it).
Triton's fast sqrt and division are float32 approximations within an ulp or two; torch's IEEE ops
stand in for them.
"""
import torch


def qk_l2norm_in_kernel(x: torch.Tensor) -> torch.Tensor:
    b = x.float()                                                    # 1.
    return b / torch.sqrt((b * b).sum(-1, keepdim=True) + 1e-6)      # 2-3. eps inside, float32
