"""A model of flash-linear-attention's l2norm at 25493c5 ("[Norm] Unify eps behaviors across
kernels", which put eps back inside the square root after PR #508): fla/modules/l2norm.py, the
forward kernels l2norm_fwd_kernel1 (lines 25-44) and l2norm_fwd_kernel (lines 87-108), launched by
l2norm_fwd (lines 145-188) through l2norm (lines 262-267). Written here from reading it, in PyTorch.

Per row:
  1. x is loaded and cast to float32;
  2. rstd = 1 / sqrt(sum(x * x) + eps), all float32, eps inside the square root;
  3. y = x * rstd in float32, rounded once to the output dtype (the input's) by the store.
Triton's fast sqrt and division are float32 approximations within an ulp or two; torch's IEEE ops
stand in for them.
"""
import torch


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    b_x = x.float()                                               # 1.
    b_rstd = 1 / torch.sqrt((b_x * b_x).sum(-1, keepdim=True) + eps)   # 2. eps inside
    return (b_x * b_rstd).to(x.dtype)                             # 3. one rounding
