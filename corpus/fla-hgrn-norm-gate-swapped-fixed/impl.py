"""The output norm of flash-linear-attention's HGRN layer at a5baa97 ("[HGRN] Fix order errors of
norm with gate"): fla/layers/hgrn.py line 144 calls self.g_norm (a FusedRMSNormSwishGate) as
g_norm(o, g_proj(hidden_states)): the recurrent output normalised, the gate projection gating it.

FusedRMSNormSwishGate runs fla/modules/fused_norm_gate.py's _layer_norm_fwd_1pass_kernel (lines
72-139) with IS_RMS_NORM, a weight and no bias; written here from reading it, in PyTorch. Per row:
  1. x loaded and cast to float32; var = mean(x * x); rstd = 1 / sqrt(var + eps), float32;
  2. y = x * rstd * w, w cast to float32;
  3. the gate cast to float32; y = y * g * sigmoid(g) (swish);
  4. y rounded once to the output dtype (the input's) by the store.
"""
import torch


def fused_rms_norm_swish_gate(a, b, weight, eps):
    """The kernel: RMSNorm of a, times w, gated by swish(b), in float32, one rounding."""
    af = a.float()
    rstd = 1 / torch.sqrt((af * af).mean(-1, keepdim=True) + eps)    # 1.
    y = af * rstd * weight.float()                                    # 2.
    bf = b.float()
    y = y * bf * torch.sigmoid(bf)                                    # 3.
    return y.to(a.dtype)                                              # 4.


def hgrn_output_norm(x, gate, weight, eps):
    """hgrn.py line 144 after the fix: g_norm(o, g_proj(hidden_states))."""
    return fused_rms_norm_swish_gate(x, gate, weight, eps)
