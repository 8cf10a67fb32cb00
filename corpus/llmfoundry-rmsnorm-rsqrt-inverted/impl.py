"""A model of LLM Foundry's RMSNorm at 3dbdd94 (llmfoundry/models/layers/norm.py: the functional
rms_norm, lines 54-58, and the RMSNorm module, lines 61-80), written here from reading it, in PyTorch.

The module converts its input to float32 and hands it to the helper with its float32 weight; the
helper takes the reciprocal square root of mean(x^2) + eps and then *divides* x by it (so x is
multiplied by the RMS: issue #371, fixed by PR #372), multiplies by the weight, and the module
converts the float32 result back to the input dtype once.
"""
import torch


def _normalise(x, weight, eps):
    inv_rms = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    out = x / inv_rms                       # divides by the reciprocal: the bug
    return out if weight is None else out * weight


class RMSNorm(torch.nn.Module):
    def __init__(self, normalized_shape, eps=1e-5, weight=True, dtype=None, device=None):
        super().__init__()
        self.eps = eps
        if weight:
            self.weight = torch.nn.Parameter(torch.ones(normalized_shape, dtype=dtype, device=device))
        else:
            self.register_parameter("weight", None)

    def forward(self, x):
        return _normalise(x.float(), self.weight, self.eps).to(dtype=x.dtype)
