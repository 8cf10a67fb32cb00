"""A model of flash-linear-attention's rms_norm_ref at bc3b101 (fla/modules/layernorm_gated.py, lines
27-47), written here from reading it: the same reference function as mamba's (weight and bias to
float32, x and z upcast, optional gate-first, per-row or per-group 1 / sqrt(mean of squares + eps), the
weight, optional gate-after, one cast back). fla's gated linear-attention layers (GatedDeltaNet,
Qwen3-Next-style) use it with norm_before_gate=True and no groups: norm, weight, then silu(z)."""
import torch
import torch.nn.functional as F


def rms_norm_ref(x, weight, bias, z=None, eps=1e-6, group_size=None, norm_before_gate=True, upcast=True):
    dtype = x.dtype
    weight = weight.float()
    bias = bias.float() if bias is not None else None
    if upcast:
        x = x.float()
        z = z.float() if z is not None else z
    if z is not None and not norm_before_gate:
        x = x * F.silu(z)
    if group_size is None:
        rstd = 1 / torch.sqrt(x.square().mean(dim=-1, keepdim=True) + eps)
        out = x * rstd * weight
        out = out + bias if bias is not None else out
    else:
        g = x.reshape(*x.shape[:-1], x.shape[-1] // group_size, group_size)
        rstd = 1 / torch.sqrt(g.square().mean(dim=-1, keepdim=True) + eps)
        out = (g * rstd).reshape(x.shape) * weight
        out = out + bias if bias is not None else out
    if z is not None and norm_before_gate:
        out = out * F.silu(z)
    return out.to(dtype)
