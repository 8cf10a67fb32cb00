"""tinygrad's LLaMA RMSNorm at 1fb815e (PR #2932, "RMSNorm cannot have float16 input"):
extra/models/llama.py lines 33-41, written here from reading it, in tinygrad (the installed release
runs it).

The call first converts x to float32; the mean of the squares, eps, the reciprocal square root, the
product with x and with the all-ones float32 weight are then float32, and the float32 result is
returned as it is (the model's blocks convert to half after the norm).
"""
from tinygrad import Tensor


class RMSNorm:
    def __init__(self, dim, eps=1e-6):
        self.eps = eps
        self.weight = Tensor.ones(dim)

    def __call__(self, x: Tensor):
        x = x.float()                                                # PR #2932
        return (x * (x.pow(2).mean(-1, keepdim=True) + self.eps).rsqrt()) * self.weight
