"""A model of flash-linear-attention's FusedRMSNormGated at 25493c5 ("[Norm] Unify eps behaviors
across kernels", eps back inside the square root after PR #508): fla/modules/fused_norm_gate.py, the
forward kernels layer_norm_gated_fwd_kernel (lines 33-104, D <= 512) and
layer_norm_gated_fwd_kernel1 (lines 121-187), launched by layer_norm_gated_fwd (lines 446-522)
through rms_norm_gated (lines 846-867) from FusedRMSNormGated.forward (lines 993-1054), with the
default 'swish' activation. Written here from reading it, in PyTorch.

Per row (no residual, no bias):
  1. x is loaded and cast to float32;
  2. the mean of x * x in float32; rstd = 1 / sqrt(mean + eps);
  3. x * rstd * w, with w cast to float32;
  4. the gate g cast to float32; y = y * g * sigmoid(g) (swish), in float32;
  5. y rounded once to the input dtype by the store.
Triton's fast sqrt, division and sigmoid are float32 approximations; torch's ops stand in for them.
"""
import torch
from torch import nn


class FusedRMSNormGated(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden_size))

    def forward(self, x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        b_x = x.float()                                               # 1.
        b_var = (b_x * b_x).sum(-1, keepdim=True) / x.shape[-1]       # 2.
        b_rstd = 1 / torch.sqrt(b_var + self.eps)                     # 2. eps inside
        b_y = b_x * b_rstd * self.weight.float()                      # 3.
        b_g = g.float()
        b_y = b_y * b_g * torch.sigmoid(b_g)                          # 4. swish gate
        return b_y.to(x.dtype)                                        # 5. one rounding
