"""The grouped gated RMSNorm of flash-linear-attention's Mamba2 mixer on its fused path at 0788d5c
("post merge fixes for mamba2 - ... norm before gate flag"): fla/models/mamba2/modeling_mamba2.py
lines 338-357 call mamba_ssm's mamba_split_conv1d_scan_combined with norm_before_gate=False and
ngroups=self.n_groups; that function normalises with mamba_ssm's Triton kernel, group_size =
dim // ngroups (mamba_ssm/ops/triton/layernorm_gated.py, _layer_norm_fwd_1pass_kernel, lines 45-105,
at state-spaces/mamba 60dadf2). Written here from reading both, in PyTorch.

The kernel, per row and group of group_size channels, with norm_before_gate False:
  1. x and z loaded and cast to float32; x *= z * sigmoid(z);
  2. var = sum(x * x) / group_size in float32; rstd = 1 / sqrt(var + eps);
  3. y = x * rstd * w, w cast to float32;
  4. y rounded once to the output dtype (the input's) by the store.
"""
import torch


def _layer_norm_fwd(x, weight, eps, z, group_size, norm_before_gate):
    """mamba_ssm's _layer_norm_fwd with is_rms_norm=True and no bias, as the kernel computes it."""
    shape = x.shape
    xf = x.float().reshape(*shape[:-1], -1, group_size)              # 1. one program per group
    zf = z.float().reshape(*shape[:-1], -1, group_size)
    if not norm_before_gate:
        xf = xf * (zf * torch.sigmoid(zf))                           # 1. gate first
    var = (xf * xf).sum(-1, keepdim=True) / group_size              # 2.
    rstd = 1 / torch.sqrt(var + eps)
    y = xf * rstd * weight.float().reshape(-1, group_size)          # 3.
    if norm_before_gate:
        y = y * (zf * torch.sigmoid(zf))
    return y.reshape(shape).to(x.dtype)                              # 4. one rounding


def mamba2_fused_path_norm(x, gate, weight, group_size, eps):
    """The norm as the fused path runs it after the fix: norm_before_gate=False."""
    return _layer_norm_fwd(x, weight, eps, gate, group_size, norm_before_gate=False)
