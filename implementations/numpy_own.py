"""Own NumPy implementation: inputs and outputs in the case dtype (bfloat16 through ml_dtypes),
statistics in float32, and the convention's cast points, exactly as the PyTorch modules do them.

It honours every knob of the contract, so the same code also computes the mutants' formulas.
"""
from __future__ import annotations

import numpy as np

from normdiff.cases.model import CaseInputs
from normdiff.harness.contracts import Contract

_F32 = np.float32


def _act(z: np.ndarray, kind: str) -> np.ndarray:
    sig = (1.0 / (1.0 + np.exp(-z))).astype(_F32)
    return z * sig if kind == "silu" else sig


def _inverse_scale(xs: np.ndarray, c: Contract, dtype) -> np.ndarray:
    """1 / (the denominator), float32, one value per normalised span; the denominator itself
    for the inverted contract."""
    inverse = _reciprocal_denominator(xs, c, dtype)
    return 1.0 / inverse if c.inverted else inverse


def _reciprocal_denominator(xs: np.ndarray, c: Contract, dtype) -> np.ndarray:
    xs = xs.astype(dtype if c.stats_dtype == "input" else _F32)
    if c.statistic == "variance":
        xs = xs - xs.mean(-1, keepdims=True)
    # squares in the statistics dtype, accumulated in float32 and rounded once, as torch and XLA
    # reduce bf16/fp16 on CPU (ml_dtypes' own bf16 sum would accumulate in bf16 and stall)
    squares = xs * xs
    stat = squares.astype(_F32).sum(-1, keepdims=True).astype(squares.dtype)
    if c.statistic != "sum_square":
        stat = stat / xs.dtype.type(xs.shape[-1])
    stat = stat.astype(_F32)
    if c.eps_placement == "inside":
        return 1.0 / np.sqrt(stat + _F32(c.eps))
    if c.eps_placement == "outside":
        return 1.0 / (np.sqrt(stat) + _F32(c.eps))
    if c.eps_placement == "clamp":
        return 1.0 / np.maximum(np.sqrt(stat), _F32(c.eps))
    with np.errstate(divide="ignore"):
        return 1.0 / np.sqrt(stat)


def _scale(weight: np.ndarray, c: Contract, dtype) -> np.ndarray:
    """offset + w, in float32 or (the mutant) in the input dtype."""
    if c.offset_dtype == "input":
        return (weight + weight.dtype.type(c.weight_offset)).astype(dtype)
    return weight.astype(_F32) + _F32(c.weight_offset)


def run(op: str, c: Contract, inputs: CaseInputs) -> np.ndarray:
    a = inputs.arrays
    x = a["x"]
    dtype = x.dtype
    xf = x.astype(_F32)
    spec = c.spec
    gate = _act(a["gate"].astype(_F32), c.gate_activation) if spec.has_gate else None
    if spec.has_gate and c.gate_order == "gate_then_norm":
        xf = xf * gate
    heads = inputs.num_heads if c.scope == "head" else 1
    spans = xf.reshape(*xf.shape[:-1], heads, -1)
    with np.errstate(invalid="ignore"):
        y = (spans * _inverse_scale(spans, c, dtype)).reshape(xf.shape)
    if spec.has_weight:
        w = a["weight"]
        if w.shape[-1] != x.shape[-1]:
            w = np.tile(w, x.shape[-1] // w.shape[-1])
        if c.cast == "llama":  # round the normalised value first, multiply in the input dtype
            y = (_scale(w, c, dtype).astype(dtype) * y.astype(dtype))
        else:
            y = y * _scale(w, c, dtype).astype(_F32)
    if spec.has_gate and c.gate_order == "norm_then_gate":
        y = y.astype(_F32) * gate
    return y.astype(dtype)
