"""A model of flash-linear-attention's rms_norm_ref at bc3b101 (fla/modules/layernorm.py, lines 64-85),
the reference for its fused residual + RMSNorm kernels, written here from reading it.
rms_norm_ref(x, weight, bias, residual=None, eps=1e-5, prenorm=False, upcast=False): with upcast the
weight, bias, x and residual go to float32; a residual is added to x and the sum cast to x's (by then
float32) dtype; rstd = 1 / sqrt(mean of squares + eps); out = x * rstd * weight (+ bias) cast to the
original dtype once; with prenorm it returns (out, the sum), the sum left in the working dtype."""
import torch


def rms_norm_ref(x, weight, bias, residual=None, eps=1e-5, prenorm=False, upcast=False):
    dtype = x.dtype
    if upcast:
        weight = weight.float()
        bias = bias.float() if bias is not None else None
        x = x.float()
        residual = residual.float() if residual is not None else residual
    if residual is not None:
        x = (x + residual).to(x.dtype)  # float32 with upcast: no rounding to the input dtype
    rstd = 1 / torch.sqrt(x.square().mean(dim=-1, keepdim=True) + eps)
    out = x * rstd * weight
    out = out + bias if bias is not None else out
    out = out.to(dtype)
    return out if not prenorm else (out, x)
