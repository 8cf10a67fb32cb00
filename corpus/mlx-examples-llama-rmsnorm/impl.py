"""A model of the RMSNorm that ml-explore/mlx-examples' Llama example defined before it switched to
mlx.nn.RMSNorm (llms/llama/llama.py at fbed720, lines 31-42), written here in MLX from reading it:
RMSNorm(dims, eps=1e-5) with an all-ones weight; _norm scales by the rsqrt of (mean of squares over the
last axis + eps); the call runs it on a float32 copy, casts back to x's dtype, and multiplies by the
weight in that dtype (the Llama cast)."""
import mlx.core as mx
import mlx.nn as nn


class RMSNorm(nn.Module):
    def __init__(self, dims: int, eps: float = 1e-5):
        super().__init__()
        self.weight = mx.ones((dims,))
        self.eps = eps

    def _norm(self, x):
        return x * mx.rsqrt(x.square().mean(-1, keepdims=True) + self.eps)

    def __call__(self, x):
        out = self._norm(x.astype(mx.float32)).astype(x.dtype)
        return self.weight * out
