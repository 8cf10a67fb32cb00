"""A model of Liger-Kernel's RMSNorm as the Gemma patch installed it at e7c2505 (PR #92, the fix of
issue #89): src/liger_kernel/ops/rms_norm.py, the Triton forward kernel, lines 30-91, with
casting_mode "gemma", offset 1.0 (monkey_patch.py lines 155-158). Written here from reading it, in
PyTorch.

Per row, in the Gemma casting mode:
  1. x and w are loaded and cast to float32;
  2. the mean of x * x in float32, plus eps, through rsqrt, in float32;
  3. x * inv_rms, then * (offset + w), all float32, rounded once to the input dtype by the store.
The float32 sum is a tree reduction on the GPU; torch's CPU sum stands in for it (both float32).
"""
import torch
from torch import nn


class LigerRMSNorm(nn.Module):
    """Liger's module as `partial(LigerRMSNorm, offset=1.0, init_fn="zeros", casting_mode="gemma")`."""

    def __init__(self, hidden_size: int, eps: float = 1e-6, offset: float = 1.0) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(hidden_size))
        self.variance_epsilon = eps
        self.offset = offset

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        dtype = hidden_states.dtype
        x = hidden_states.float()                                        # 1.
        w = self.weight.float()
        inv_rms = torch.rsqrt((x * x).sum(-1, keepdim=True) / x.shape[-1] + self.variance_epsilon)  # 2.
        return (x * inv_rms * (self.offset + w)).to(dtype)              # 3. one rounding
