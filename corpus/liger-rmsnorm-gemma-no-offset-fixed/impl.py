"""Liger-Kernel's RMSNorm as `apply_liger_kernel_to_gemma` installs it at ead96b6 (the newest stored
snapshot): the Triton forward kernel of src/liger_kernel/ops/rms_norm.py, lines 58-140, run with
casting_mode "gemma" and offset 1.0 (src/liger_kernel/transformers/monkey_patch.py line 954). The fix
of issue #74 (the 1 + w Gemma needs) came in PR #85; PR #92 then moved the statistic to float32
(issue #89). Written here from reading the kernel, in PyTorch.

What one program (one row) does in this mode:
  - the row and the weight are loaded and both converted to float32 before any arithmetic;
  - eps and offset, scalar arguments, are pinned to float32;
  - the mean square is the float32 sum of the squares over the width divided by the width; its
    reciprocal square root (with eps under the root) is kept per row;
  - the row is multiplied by that factor, then by offset + w, still in float32;
  - the product is converted back to the input's dtype once, at the store.
The kernel's float32 tree reduction is stood in for by torch's float32 sum on the CPU.
"""
import torch
from torch import nn


class LigerRMSNormForGemma(nn.Module):
    """The module the Gemma patch builds: zero-initialised weight, offset 1.0, Gemma casting."""

    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(hidden_size))
        self.variance_epsilon = eps
        self.offset = 1.0

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        in_dtype = hidden_states.dtype
        row = hidden_states.to(torch.float32)
        gain = self.weight.to(torch.float32)
        n = row.shape[-1]
        rstd = torch.rsqrt(row.mul(row).sum(dim=-1, keepdim=True) / n + self.variance_epsilon)
        out = row * rstd * (self.offset + gain)
        return out.to(in_dtype)
