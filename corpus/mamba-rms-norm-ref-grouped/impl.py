"""A model of state-spaces/mamba's rms_norm_ref at e9594ce (mamba_ssm/ops/triton/layernorm_gated.py,
lines 18-39), the PyTorch reference its gated-norm Triton kernel is tested against, written here from
reading it. rms_norm_ref(x, weight, bias, z=None, eps=1e-6, group_size=None, norm_before_gate=True,
upcast=True): the weight (and bias) go to float32; with upcast, x and z too. With norm_before_gate
False (Mamba2's choice) x is first multiplied by silu(z). With group_size, the last axis is split into
groups of that size, each scaled by 1 / sqrt(mean of squares + eps), put back together and multiplied
by the weight (plus the bias); without, the same over the whole row. With norm_before_gate True the
gate multiplies after the norm. The result is cast to x's dtype once. (The original regroups with
einops.rearrange; a reshape does the same here.)"""
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
        x = x * F.silu(z)  # gate first
    if group_size is None:
        rstd = 1 / torch.sqrt(x.square().mean(dim=-1, keepdim=True) + eps)
        out = x * rstd * weight
        out = out + bias if bias is not None else out
    else:
        g = x.reshape(*x.shape[:-1], x.shape[-1] // group_size, group_size)  # ... (g d) -> ... g d
        rstd = 1 / torch.sqrt(g.square().mean(dim=-1, keepdim=True) + eps)
        out = (g * rstd).reshape(x.shape) * weight
        out = out + bias if bias is not None else out
    if z is not None and norm_before_gate:
        out = out * F.silu(z)  # gate after
    return out.to(dtype)
