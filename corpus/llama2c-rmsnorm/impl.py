"""A model of llama2.c's rmsnorm at 350e04f (karpathy/llama2.c run.c, lines 182-195), a C function on
float32 arrays, written here in NumPy from reading it. Per row: a float32 running sum of x[j] * x[j]
taken sequentially over j, divided by the width, plus the literal 1e-5f, then 1 / sqrtf of it; each
output is weight[j] * (that factor * x[j]), all in float32. The C function writes into an output
pointer and takes no eps; this model returns the output. Inputs of another dtype are widened to float32
as a caller of the C code would, and the result is float32 (the C code has no other dtype)."""
import numpy as np


def rmsnorm(x, weight):
    xf = np.asarray(x, dtype=np.float32)
    wf = np.asarray(weight, dtype=np.float32)
    size = xf.shape[-1]
    ss = np.zeros(xf.shape[:-1], dtype=np.float32)
    for j in range(size):  # the C loop's order: one float32 product, one float32 add per element
        ss = ss + xf[..., j] * xf[..., j]
    ss = ss / np.float32(size)
    ss = ss + np.float32(1e-5)
    ss = np.float32(1.0) / np.sqrt(ss)
    return wf * (ss[..., None] * xf)
