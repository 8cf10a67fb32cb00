"""A model of Liger-Kernel's RMSNorm as `apply_liger_kernel_to_gemma` installed it for GemmaRMSNorm at
4adae50 (src/liger_kernel/ops/rms_norm.py, the Triton forward kernel, lines 25-68, and
src/liger_kernel/transformers/rms_norm.py lines 7-16), written here from reading it, in PyTorch.

The monkey patch swapped Gemma's RMSNorm for Liger's plain one (monkey_patch.py line 127), so the
stored zero-centred weight is used as the scale itself: the 1 + w of HF's GemmaRMSNorm is missing
(Liger-Kernel issue #74, fixed by PR #85).

Per row, as the kernel runs (Triton 3.0 type rules, the release of the time):
  1. the row is loaded in the input dtype; each square x * x is computed in that dtype (one rounding
     per element for bf16 / fp16);
  2. tl.sum promotes bfloat16 to float32 before reducing, and reduces float16 as float16 (a tree
     reduction: modelled here as a pairwise sum over the power-of-two block, zeros past the row);
  3. the sum divided by the width (a division, so in float32), plus eps, through rsqrt, in float32;
  4. x * inv_rms * w with x and w in the input dtype and inv_rms float32: float32 arithmetic,
     rounded once to the input dtype by the store.
"""
import torch
from torch import nn


def _tree_sum(v: torch.Tensor) -> torch.Tensor:
    """Pairwise sum over the last dim in v's dtype, as a block reduction does (zeros pad the block)."""
    n = v.shape[-1]
    block = 1 << max(n - 1, 0).bit_length()
    if block > n:
        v = torch.cat([v, v.new_zeros(*v.shape[:-1], block - n)], dim=-1)
    while v.shape[-1] > 1:
        half = v.shape[-1] // 2
        v = v[..., :half] + v[..., half:]
    return v


def _forward(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    dtype = x.dtype
    squares = x * x                                   # 1. in the input dtype
    acc = squares.float() if dtype == torch.bfloat16 else squares
    mean_square = _tree_sum(acc).float() / x.shape[-1]  # 2-3. bf16 -> float32 sum; fp16 summed in fp16
    inv_rms = torch.rsqrt(mean_square + eps)          # 3. float32
    y = x.float() * inv_rms * w.float()               # 4. float32 arithmetic (no offset: the bug)
    return y.to(dtype)                                # one rounding at the store


class LigerRMSNorm(nn.Module):
    """Liger's module as the Gemma patch used it (weight, variance_epsilon, no offset)."""

    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        shape = hidden_states.shape
        return _forward(hidden_states.reshape(-1, shape[-1]), self.weight, self.variance_epsilon).reshape(shape)
