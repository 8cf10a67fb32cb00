"""tinygrad's LLaMA RMSNorm at b469fe3 (extra/models/llama.py lines 33-40), written here from reading
it, in tinygrad (the installed release runs it).

The weight is an all-ones float32 tensor. The call squares x, takes the mean over the last axis, adds
eps and takes the reciprocal square root, all in x's own dtype (a TODO in the source asks whether to
convert to float; fp16 squares overflow above |x| = 256), multiplies x by it in that dtype, then by
the float32 weight, which promotes the product to float32. PR #2932 converts x to float first.
"""
from tinygrad import Tensor


class RMSNorm:
    def __init__(self, dim, eps=1e-6):
        self.eps = eps
        self.weight = Tensor.ones(dim)

    def __call__(self, x: Tensor):
        inv = (x.pow(2).mean(-1, keepdim=True) + self.eps).rsqrt()   # in x's dtype
        return (x * inv) * self.weight                               # float32 weight promotes
