"""The grouped gated RMSNorm of flash-linear-attention's Mamba2 mixer on its fused path at 3f1cd7a:
fla/models/mamba2/modeling_mamba2.py lines 339-358 call mamba_ssm's mamba_split_conv1d_scan_combined
with norm_before_gate=self.norm_before_gate, which the config defaults to True
(configuration_mamba2.py line 122), and ngroups=self.n_groups. That function normalises with
mamba_ssm's Triton kernel, group_size = dim // ngroups (mamba_ssm/ops/triton/ssd_combined.py;
the kernel: mamba_ssm/ops/triton/layernorm_gated.py, _layer_norm_fwd_1pass_kernel, lines 45-105, at
state-spaces/mamba 60dadf2). Written here from reading both, in PyTorch.

Mamba2 gates first (RMSNorm(x * silu(z)) per group); with norm_before_gate=True the kernel computes
RMSNorm(x) * silu(z) per group instead. Fixed by fla 0788d5c ("norm before gate flag": False).

The kernel, per row and group of group_size channels:
  1. x loaded and cast to float32 (and, when norm_before_gate is False, x *= z * sigmoid(z), z float32);
  2. var = sum(x * x) / group_size in float32; rstd = 1 / sqrt(var + eps);
  3. y = x * rstd * w, w cast to float32;
  4. when norm_before_gate is True, y *= z * sigmoid(z) (z float32);
  5. y rounded once to the output dtype (the input's) by the store.
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
        y = y * (zf * torch.sigmoid(zf))                             # 4. gate after
    return y.reshape(shape).to(x.dtype)                              # 5. one rounding


def mamba2_fused_path_norm(x, gate, weight, group_size, eps):
    """The norm as the fused path runs it: norm_before_gate from the config, whose default is True."""
    return _layer_norm_fwd(x, weight, eps, gate, group_size, norm_before_gate=True)
