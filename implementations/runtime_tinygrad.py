"""tinygrad's own norms (`tinygrad.nn`), on its CPU device (kernels compiled with clang >= 16 for
bf16: frameworks/tinygrad.py), called as a user calls them on the case's tensors.

  nn.RMSNorm(dim, eps)      `(x.float() * (x.float().square().mean(-1) + eps).rsqrt()).cast(x.dtype)
                            * weight`: float32 statistics, the normalised value ROUNDED TO THE INPUT
                            DTYPE, then times the weight in it: the Llama cast (eps defaults to 1e-6).
  nn.LayerNorm(shape, eps)  `x.layernorm(eps) * weight + bias`, where layernorm is
                            `y = x - x.mean(); y * (y*y).mean().add(eps).rsqrt()` IN THE INPUT DTYPE:
                            tinygrad's mean accumulates a bf16 / fp16 sum in float32 but casts the
                            mean back to the input dtype, so for bf16 / fp16 the mean, x - mean, the
                            squares, the variance, var + eps, rsqrt and every product are rounded to
                            it (the `stats-low-precision` knob, stats_dtype="input", and more). In
                            float32 it is F.layer_norm's order.

The LayerNorm's rounding is a finding, not hidden here (measured, tinygrad 0.14, clang 16): at mean
1000 the bf16 mean is off by up to 2 against a std of ~4 (51 bf16 ulp at narrow:4, budget 2.3); in
fp16 a square of |x - mean| > 256 overflows, the variance is inf, rsqrt 0 and the row collapses to
the bias (2266 ulp on outlier rows; on 15 of 16 such rows: clang keeps some fp16 products in float32).

Declared for: RMSNorm on rms_norm@qwen3, rms_norm@llama, rms_norm@deepseek-v3 and qk_norm@qwen3
(per head, the (head_dim,) weight shared by the heads; the rows reshaped to (rows, heads, head_dim));
LayerNorm on layer_norm@torch, the maths it implements: its low-precision statistics are what a
user of nn.LayerNorm in bf16 / fp16 gets, judged against F.layer_norm's budget as they are.

Weights and bias: the case's, in the case dtype, as a model loaded in that dtype holds them (with
tinygrad's float32 ones the product would promote to float32). eps: always the contract's.

Kernels are compiled per shape (and tinygrad's kernel cache is off: frameworks/tinygrad.py), so rows
are padded to a power of two with zero rows (harmless: rows are independent and eps keeps them
finite; sliced off), as jax_own pads, to share compiled kernels across batches. Only ever imported
inside the tinygrad worker.
"""
from __future__ import annotations

import numpy as np

from tinygrad import nn

from normdiff.cases.model import CaseInputs
from normdiff.harness.data.contracts import Contract
from normdiff.implementations.frameworks.tinygrad import from_numpy, to_numpy


def _padded_rows(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def _operands(op: str, contract: Contract, inputs: CaseInputs, *names: str):
    """x padded to a power of two of rows and viewed per head where the norm is per head; the other
    operands, tiled across the span where shorter; and (rows, x's shape) to return to."""
    missing = [n for n in ("x", *names) if n not in inputs.arrays]
    if missing:
        raise ValueError(f"this built-in takes {', '.join(missing)}; the op gives only {', '.join(inputs.arrays)}")
    x = np.asarray(inputs.arrays["x"])
    rows = x.shape[0]
    padded = np.pad(x, ((0, _padded_rows(rows) - rows), (0, 0)))
    heads = inputs.num_heads if contract.scope == "head" else 1  # one span per row for the row ops
    if heads > 1:
        padded = padded.reshape(padded.shape[0], heads, -1)
    width = padded.shape[-1]
    others = []
    for name in names:
        v = np.asarray(inputs.arrays[name])
        others.append(v if v.shape[-1] == width else np.tile(v, width // v.shape[-1]))
    return from_numpy(padded), [from_numpy(v) for v in others], (rows, x.shape)


def _result(y, where) -> np.ndarray:
    rows, shape = where
    return to_numpy(y).reshape(-1, shape[-1])[:rows].reshape(shape)


def nn_rms_norm(op: str, contract: Contract, inputs: CaseInputs) -> np.ndarray:
    x, (weight,), where = _operands(op, contract, inputs, "weight")
    norm = nn.RMSNorm(x.shape[-1], eps=contract.eps)
    norm.weight = weight  # in the case dtype
    return _result(norm(x), where)


def nn_layer_norm(op: str, contract: Contract, inputs: CaseInputs) -> np.ndarray:
    x, (weight, bias), where = _operands(op, contract, inputs, "weight", "bias")
    norm = nn.LayerNorm(x.shape[-1], eps=contract.eps)
    norm.weight, norm.bias = weight, bias  # in the case dtype
    return _result(norm(x), where)
