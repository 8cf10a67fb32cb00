"""A model of LLM Foundry's RMSNorm at 625f263 (PR #372, the fix of issue #371):
llmfoundry/models/layers/norm.py, the functional rms_norm (lines 54-58) and the RMSNorm module
(lines 61-80), written here from reading it, in PyTorch.

The module converts its input to float32; the helper multiplies x by the reciprocal square root of
mean(x^2) + eps (PR #372 turned the division into this product), then by the float32 weight; the
module converts the result back to the input dtype once. (The module's weight=False option, no
gain, is left out here: normdiff checks the affine form.)
"""
import torch


def _normalise(x, weight, eps):
    out = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return out if weight is None else out * weight


class RMSNorm(torch.nn.Module):
    def __init__(self, normalized_shape, eps=1e-5, weight=True, dtype=None, device=None):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(normalized_shape, dtype=dtype, device=device))
        self.eps = eps

    def forward(self, x):
        y = _normalise(x.float(), self.weight, self.eps)   # float32 throughout
        return y.to(dtype=x.dtype)                          # one rounding
