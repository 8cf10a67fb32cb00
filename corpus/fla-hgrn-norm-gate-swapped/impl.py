"""The output norm of flash-linear-attention's HGRN layer at f10cad2: fla/layers/hgrn.py line 144
calls self.g_norm (a FusedRMSNormSwishGate, line 70) as g_norm(g_proj(hidden_states), o): the gate
projection in the input's place and the recurrent output o in the gate's, so the gate is
normalised and the output only gates it. Fixed by a5baa97 ("[HGRN] Fix order errors of norm with
gate"), which passes (o, g_proj(hidden_states)).

FusedRMSNormSwishGate runs fla/modules/fused_norm_gate.py's _layer_norm_fwd_1pass_kernel (lines
72-139) with IS_RMS_NORM, a weight and no bias; written here from reading it, in PyTorch. Per row of
its first argument a and its gate argument b:
  1. a loaded and cast to float32; var = mean(a * a); rstd = 1 / sqrt(var + eps), float32;
  2. y = a * rstd * w, w cast to float32;
  3. b cast to float32; y = y * b * sigmoid(b) (swish);
  4. y rounded once to the output dtype (the input's) by the store.
The target takes the op's operands (x: the recurrent output o, gate: g_proj(hidden_states)) and
passes them as line 144 did.
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
    """hgrn.py line 144 before the fix: g_norm(g_proj(hidden_states), o)."""
    return fused_rms_norm_swish_gate(gate, x, weight, eps)
