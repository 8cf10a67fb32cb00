"""examples/python/my_norm.py after a refactor that saves the float32 copy of x: the statistic is now
summed in x's own dtype. Right in float32; in bfloat16 and float16 the sum of squares in the input
dtype leaves the budget (and x^2 of tiny activations underflows in float16). docs/baselines.md shows a
baseline catching it."""
import numpy as np


def rms_norm(x, weight, eps):
    variance = (x * x).mean(-1, keepdims=True, dtype=x.dtype)
    y = x.astype(np.float32) / np.sqrt(variance.astype(np.float32) + np.float32(eps))
    return weight * y.astype(x.dtype)
