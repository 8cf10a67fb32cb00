"""The exact maths the quantizing norms share (rms_norm_quant, add_rms_norm_quant): the norm's exact y
(norm.py), a scale per row or block from its exact amax, and the quotient y / scale rounded once to
the format (harness/data/quant.py), all in float64. Pure NumPy.

    y      = the norm's exact output (h = x + residual first, for the fused add)
    a      = max(amax |y| over the block, amax_floor)     (|y / (offset + w)|: scale_from "normalised")
    s      = max(R(a / quant_max), scale_floor)           R: the contract's scale_rounding
    q      = Q(y / s), 0 where s = 0                      Q: nearest-even in quant_dtype, clamped to its range

R: "none" keeps a / quant_max; "ceil_pow2" the least power of two >= it (UE8M0 / E8M0 round-up);
"ocp_floor" 2^(floor(log2 a) - emax), emax = floor(log2 of the format's max) (OCP MX v1.0, section
6.3: 2 for E2M1, 8 for E4M3); "floor_pow2" and "nearest_pow2" (bugs: the exponent truncated, or
rounded in log2). A zero block's power-of-two scale is 1 (MLX writes the byte 127 for one). "e4m3": rounded to
FP8 E4M3FN, nearest even, saturating at 448 (NVFP4's block scale; a zero block's is 0).

Given a per-tensor scale t (rms_norm_quant_static's `tensor_scale` operand, one float32 per case),
the contract's `tensor_scale` says what it is: "divisor", the scale itself (s = t, q = Q(y / t):
vLLM's and FlashInfer's static FP8); "multiplier", its inverse (q = Q(y * t)); "global", NVFP4's
global encode scale g (s = R(g a / quant_max) per block, q = Q(y / (s / g))). `divisor` is what q
is divided by in every case: s, 1 / t or s / g.

Where the contract rounds y before quantizing (`quant_input` "input") and whether the quantizer
divides or multiplies by a float32 reciprocal are rounding choices: the exact maths ignores them, and
the judge brackets what each legal float32 order may give (engine/quant_judge.py).
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np

from normdiff.harness.data import quant
from normdiff.harness.data.ops import norm
from normdiff.text import general, number

if TYPE_CHECKING:
    from normdiff.harness.data.contracts import Contract


def blocks(v: np.ndarray, group: int) -> np.ndarray:
    """v (..., width) as (..., blocks, n): one block per row (group 0) or per `group` columns."""
    width = v.shape[-1]
    n = width if not group else group
    if width % n:
        raise ValueError(f"width {width} is not a multiple of the quantization block {n}")
    return v.reshape(*v.shape[:-1], width // n, n)


def emax(fmt: quant.QuantFormat) -> int:
    """The exponent of the format's largest power of two (OCP MX's emax_elem)."""
    return int(np.floor(np.log2(fmt.max)))


def scale_of(amax: np.ndarray, contract: Contract, g: float = 1.0) -> np.ndarray:
    """The contract's scale, float64, from each block's amax (exact); `g` NVFP4's global encode
    scale (1 elsewhere)."""
    fmt = quant.get_format(contract.quant_dtype)
    bound = np.maximum if contract.amax_bound == "floor" else np.minimum
    a = bound(np.asarray(amax, dtype=np.float64), contract.amax_floor) if contract.amax_floor else \
        np.asarray(amax, dtype=np.float64)
    raw = g * a / contract.quant_max
    rounding = contract.scale_rounding
    if rounding == "none":
        s = raw
    elif rounding.startswith("e4m3"):
        s = quant.get_format("float8_e4m3fn").quantize(raw, saturate=rounding == "e4m3")
    elif rounding == "ocp_floor":
        s = np.where(a > 0, np.ldexp(1.0, (quant.pow2_exponent(a, "floor") - emax(fmt)).astype(np.int64)), 1.0)
    elif rounding == "nearest_pow2":
        with np.errstate(divide="ignore"):
            s = np.where(raw > 0, np.exp2(np.clip(np.round(np.log2(np.where(raw > 0, raw, 1.0))), -127, 127)), 1.0)
    else:  # ceil_pow2, floor_pow2
        e = quant.pow2_exponent(raw, "ceil" if rounding == "ceil_pow2" else "floor")
        s = np.where(raw > 0, np.ldexp(1.0, e.astype(np.int64)), 1.0)
    return np.maximum(s, contract.scale_floor)


def given_scale(arrays: dict) -> float | None:
    """The per-tensor scale a case gives (rms_norm_quant_static's `tensor_scale`), as float64; None
    for an op that computes every scale itself."""
    t = arrays.get("tensor_scale")
    return None if t is None else float(np.asarray(t, dtype=np.float64).reshape(-1)[0])


def divisor(scale: np.ndarray, contract: Contract, given: float | None) -> np.ndarray:
    """What q divides y by, given the scale the contract stores (module docstring): the scale
    itself, or 1 / t for a multiplied per-tensor scale, or s / g for NVFP4's global scale."""
    s = np.asarray(scale, dtype=np.float64)
    if given is None or contract.tensor_scale == "divisor":
        return s
    with np.errstate(divide="ignore"):
        return 1.0 / s if contract.tensor_scale == "multiplier" else s / given


def quantized(y: np.ndarray, scale: np.ndarray, contract: Contract) -> np.ndarray:
    """Q(y / s) per block, float64 values of the format, shaped like y; 0 where s is 0 (NaN
    without the zero guard)."""
    return rounded(quotient(y, scale, contract), contract).reshape(y.shape)


def quotient(y: np.ndarray, scale: np.ndarray, contract: Contract) -> np.ndarray:
    """y / s per block, (..., blocks, n): 0 where s is 0, or 0 / 0 = NaN without the zero guard."""
    b = blocks(y, contract.quant_group)
    s = np.asarray(scale, dtype=np.float64)[..., None]
    with np.errstate(divide="ignore", invalid="ignore"):
        if not contract.zero_guard:
            return b / s
        return np.where(s != 0, b / np.where(s != 0, s, 1.0), 0.0)


def rounded(t: np.ndarray, contract: Contract) -> np.ndarray:
    """Quotients as the contract stores them: clamped to +-quant_max (INT8: [-128, 127] when its max
    is 127), then cast to the format, nearest-even (or the contract's rounding); beyond the format's
    own range the cast's NaN or inf (a clamp at a larger max than the format's, or none)."""
    fmt = quant.get_format(contract.quant_dtype)
    if contract.saturate:
        with np.errstate(invalid="ignore"):
            t = np.clip(t, *clamp_range(contract))
    return fmt.quantize(t, saturate=False, rounding=contract.quant_rounding)


def clamp_range(contract: Contract) -> tuple[float, float]:
    """The range a contract that saturates clamps quotients to: [-quant_max, quant_max], and INT8's
    -128 below when its max is the format's 127."""
    fmt = quant.get_format(contract.quant_dtype)
    low = -contract.quant_max - (1.0 if fmt.lowest == -fmt.max - 1 and contract.quant_max == fmt.max else 0.0)
    return low, contract.quant_max


def scale_bits(contract: Contract) -> str:
    """What a scale returned as uint8 bytes holds: E4M3 codes (NVFP4's block scales), else E8M0's
    biased exponents (MX, UE8M0)."""
    return "float8_e4m3fn" if contract.scale_rounding.startswith("e4m3") else "e8m0"


def scale_encoding(scale, contract: Contract) -> str:
    """How to read an implementation's scales (quant.decode's `fmt`): bytes as the contract encodes
    them, anything else as the numbers it holds."""
    return scale_bits(contract) if np.asarray(scale).dtype == np.uint8 else "float32"


def dequantized(q, scale, contract: Contract) -> np.ndarray:
    """q * scale, float64, shaped like q: each value times its row's or block's scale, what the
    quantized matmul after the norm computes with (NaN where q is NaN). q as quant.decode reads it
    (the format's dtype, or its raw bits as uint8); scale float32, or an E8M0 byte as uint8, in any
    layout that holds one per row or block ((rows,), (rows, 1), (rows, blocks), flat)."""
    values = quant.decode(q, quant.get_format(contract.quant_dtype))
    s = quant.decode(scale, scale_encoding(scale, contract))
    b = blocks(values, contract.quant_group)
    if s.size != int(np.prod(b.shape[:-1])):
        raise ValueError(f"a scale of shape {s.shape}; the contract gives one per "
                         f"{'row' if not contract.quant_group else 'block'}, {b.shape[:-1]}")
    return (b * s.reshape(b.shape[:-1])[..., None]).reshape(values.shape)


def amax_source(y: np.ndarray, contract: Contract, arrays: dict) -> np.ndarray:
    """What the amax is taken of: y, or (scale_from "normalised") y before the weight multiply."""
    if contract.scale_from == "y" or "weight" not in arrays:
        return y
    w = contract.weight_offset + norm.tiled(arrays["weight"], y.shape[-1])
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(w != 0, y / np.where(w != 0, w, 1.0), 0.0)


def evaluate(contract: Contract, arrays: dict, num_heads: int = 1, power="nearest") -> np.ndarray:
    """The norm's exact y, float64 (the record's `exact`; `results` quantizes it)."""
    return norm.evaluate(contract, arrays, num_heads, power)


def results(contract: Contract, arrays: dict, num_heads: int = 1) -> dict[str, np.ndarray]:
    """Every result exact, float64: q (format values), scale (one per row, or per block: shape
    (rows, blocks)), y (the exact norm the judge brackets from), and a fused add's residual_out."""
    y = evaluate(contract, arrays, num_heads)
    amax = np.max(np.abs(blocks(amax_source(y, contract, arrays), contract.quant_group)), axis=-1)
    given = given_scale(arrays)
    if given is not None and contract.tensor_scale != "global":  # one scale, the tensor's, for every row
        scale = np.full(amax.shape, given)
    else:
        scale = scale_of(amax, contract, 1.0 if given is None else given)
    out = {"q": quantized(y, divisor(scale, contract, given), contract), "scale": scale, "y": y}
    if "residual" in arrays:
        out["residual_out"] = norm.residual_sum(arrays)
    return out


def no_vjp(*args, **kwargs):
    """A quantizer has no gradient (its derivative is 0 almost everywhere; training uses a
    straight-through estimator, which is not this op's contract): the op has a forward pass only."""
    raise NotImplementedError("a quantizing op has no backward pass")


def describe(contract: Contract) -> str:
    """The one-line formula `normdiff list conventions` shows."""
    c = contract
    block = "per row" if not c.quant_group else f"per block of {c.quant_group}"
    amax = "amax |y|" if c.scale_from == "y" else "amax |y / w|"
    if c.amax_floor:
        amax = f"max({amax}, {general(c.amax_floor)})"
    scale = f"{amax} / {general(c.quant_max)}"
    given = "tensor_scale" in (o.name for o in c.record.operands)
    if given and c.tensor_scale == "global":
        scale = f"g * {scale}"
    scale = {"none": scale, "ceil_pow2": f"2^ceil(log2({scale}))",
             "ocp_floor": f"2^(floor(log2 {amax}) - {emax(quant.get_format(c.quant_dtype))})",
             "floor_pow2": f"2^floor(log2({scale}))", "nearest_pow2": f"2^round(log2({scale}))",
             "e4m3": f"e4m3({scale})", "e4m3_unsaturated": f"e4m3({scale}) unclamped"}[c.scale_rounding]
    if c.scale_floor:
        scale = f"max({scale}, {number(c.scale_floor)})"
    quotient = "y / scale"
    if given:  # the case's per-tensor scale (t, or NVFP4's global g)
        scale, block, quotient = {"divisor": ("t", "for the tensor", "y / t"),
                                  "multiplier": ("t", "for the tensor", "y * t"),
                                  "global": (scale, block + ", g given", "y * g / scale")}[c.tensor_scale]
    base = norm_text(c)
    where = "y in float32" if c.quant_input == "float32" else "y rounded to the input dtype"
    clamp = "clamped" if c.saturate else "unclamped"
    rounding = {"nearest": "nearest-even", "truncate": "truncated", "half_away": "rounded half away"}[c.quant_rounding]
    results = "q, scale, h" if c.op.startswith("add_") else "q, scale"
    return (f"{base}; scale = {scale} {block}; q = {c.quant_dtype}({quotient}) {clamp}, {rounding} "
            f"({where}); returns ({results})")


def norm_text(contract: Contract) -> str:
    """The norm part of the formula, as the plain norm's describe says it (without what it returns)."""
    base_op = "add_rms_norm" if contract.op.startswith("add_") else "rms_norm"
    return re.sub(r"; returns \([^)]*\)", "", contract.replace(op=base_op).describe())
