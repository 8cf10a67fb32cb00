"""A model of Liger-Kernel's RMSNorm as the Gemma patch installed it at a8e433b (PR #85, the fix of
issue #74): src/liger_kernel/ops/rms_norm.py, the Triton forward kernel, lines 25-69, and
src/liger_kernel/transformers/rms_norm.py lines 7-23; monkey_patch.py line 129 builds it with
offset=1.0 and zero-initialised weights. Written here from reading it, in PyTorch.

PR #85 added the offset, so the scale is 1 + w as Gemma means; the statistic was left in the input
dtype, which issue #89 reported and PR #92 fixed (the casts of HF's Gemma: everything in float32).

Per row, as the kernel runs (Triton 3.0 type rules, the release of the time):
  1. the row is loaded in the input dtype; each square x * x is computed in that dtype (rounded per
     element for bf16 / fp16: in fp16 a square above 65504, |x| > 256, is inf);
  2. tl.sum promotes bfloat16 to float32 before reducing and reduces float16 as float16 (a tree
     reduction, modelled as a pairwise sum over the power-of-two block, zeros past the row);
  3. the sum divided by the width (a division: float32), plus eps, through rsqrt, in float32;
  4. offset + w: a float32 kernel argument plus the weight, float32 (Triton 3.0 promotes a
     bf16 / fp16 tensor with a float32 scalar to float32);
  5. x * inv_rms * (offset + w) in float32, rounded once to the input dtype by the store.
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


def _forward(x: torch.Tensor, w: torch.Tensor, eps: float, offset: float) -> torch.Tensor:
    dtype = x.dtype
    squares = x * x                                     # 1. in the input dtype
    acc = squares.float() if dtype == torch.bfloat16 else squares
    mean_square = _tree_sum(acc).float() / x.shape[-1]  # 2-3. bf16 -> float32 sum; fp16 summed in fp16
    inv_rms = torch.rsqrt(mean_square + eps)            # 3. float32
    scale = offset + w.float()                          # 4. float32
    return (x.float() * inv_rms * scale).to(dtype)      # 5. one rounding at the store


class LigerRMSNorm(nn.Module):
    """Liger's module as `partial(LigerRMSNorm, offset=1.0, init_fn="zeros")` built it for Gemma."""

    def __init__(self, hidden_size: int, eps: float = 1e-6, offset: float = 1.0) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(hidden_size))
        self.variance_epsilon = eps
        self.offset = offset

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        shape = hidden_states.shape
        y = _forward(hidden_states.reshape(-1, shape[-1]), self.weight, self.variance_epsilon, self.offset)
        return y.reshape(shape)
