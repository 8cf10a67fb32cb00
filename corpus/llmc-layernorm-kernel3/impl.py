"""A model of llm.c's CUDA LayerNorm forward, layernorm_forward_kernel3 at f1e2ace (karpathy/llm.c
llmc/layernorm.cuh, lines 20-65), written here in NumPy from reading it. One warp per row; floatX is the
build's activation dtype (bf16 by default, fp16 or fp32 by flag) and all arithmetic is float32:
- lane l (of 32) sums x[l], x[l+32], ... sequentially in float32, then a butterfly warp reduction
  (xor offsets 16, 8, 4, 2, 1) adds the lanes; the mean is that sum / C;
- a second pass does the same for (x - mean)^2 (nvcc contracts `sum += d * d` into a fused
  multiply-add by default, modelled as an exact product added and rounded once);
- s = rsqrtf(var + 1e-5f), eps a literal (the hardware rsqrtf is approximate to ~2 float32 ulp; this
  model rounds the exact 1 / sqrt);
- each output is (s * (x - mean)) * w + b (again an FMA) rounded once to floatX.
The kernel takes no eps and writes its output (and the mean / rstd) through pointers; this returns y."""
import numpy as np

WARP = 32


def _fma32(a, b, c):
    # a * b exact (two float32 factors fit in a double), + c, rounded once to float32
    return (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(np.float32)


def _warp_sum(lanes):
    # butterfly: every lane adds the lane whose index differs in one bit, five times
    for offset in (16, 8, 4, 2, 1):
        lanes = lanes + lanes[..., np.arange(WARP) ^ offset]
    return lanes[..., 0]


def layernorm_forward(inp, weight, bias):
    x = np.asarray(inp).astype(np.float32)
    w = np.asarray(weight).astype(np.float32)
    b = np.asarray(bias).astype(np.float32)
    rows, C = x.shape[:-1], x.shape[-1]
    steps = -(-C // WARP)
    pad = np.zeros(rows + (steps * WARP,), dtype=np.float32)
    pad[..., :C] = x
    strided = pad.reshape(rows + (steps, WARP))  # strided[..., k, l] = x[l + 32 k]
    valid = (np.arange(steps * WARP) < C).reshape(steps, WARP)
    acc = np.zeros(rows + (WARP,), dtype=np.float32)
    for k in range(steps):  # each lane's own loop, in order; lanes past C add nothing
        acc = np.where(valid[k], acc + strided[..., k, :], acc)
    m = _warp_sum(acc) / np.float32(C)
    acc = np.zeros(rows + (WARP,), dtype=np.float32)
    for k in range(steps):
        d = strided[..., k, :] - m[..., None]
        acc = np.where(valid[k], _fma32(d, d, acc), acc)
    var = _warp_sum(acc) / np.float32(C)
    s = (np.float32(1.0) / np.sqrt(var + np.float32(1e-5))).astype(np.float32)
    n = s[..., None] * (x - m[..., None])
    return _fma32(n, w, b).astype(np.asarray(inp).dtype)
