"""Judge a quantizing norm's (q, scale) in the format's own units (ops/quantize.py has the maths).

The exact reference is y in float64, the contract's scale from its exact amax, and y / scale rounded
once. A correct implementation computes y in float32 (or rounds it to the input dtype first, where
its contract does), so its amax, its scale and each quotient may differ from the exact ones by what
those legal roundings cost; near a rounding boundary of the format, that moves the quotient to the
neighbouring value. A budget on the maximum error would have to allow one format ULP everywhere,
and then an extra rounding (y rounded to bf16 before the quantizer under a float32 contract, which
moves ~4 % of FP8 codes by one) hides under it. So each element is bracketed instead:

  y     the legal values the quantizer may see: y +- the float32 budget of the norm (budgets.py), or
        +- the input dtype's budget where the contract rounds y to it before quantizing
  scale judged on its own: the contract's scale of the bracket's smallest and largest amax (each
        amax / max rounded in float32 either way; a power-of-two scale exact), so a scale off by a
        constant factor, taken before the weight, from the wrong max, or an E8M0 rounded the wrong
        way falls outside. A per-tensor scale the case gives is exact; NVFP4's E4M3 block scales of
        g * amax / 6 are bracketed like the others, the product's three float32 roundings included
  q     judged given the implementation's own scale (so that one wrong scale is not also counted as
        every q wrong): the legal codes are Q(y_lo / s) .. Q(y_hi / s), the quotient widened by a
        float32 reciprocal's rounding (a kernel may multiply by 1 / s), Q nearest-even with the
        contract's clamp (NVFP4: y * (1 / (s * (1 / g))), four roundings). Q is monotone, so every legal pipeline lands inside, and the number of
        elements outside is 0 by derivation for a correct implementation: any is a disagreement.

Reported in the format's units: max_ulp is the largest distance, in ULPs of the format, from y / s
rounded once with the implementation's scale; tolerance_ulp the widest legal bracket; off_chain the
share of elements outside it; rel_l2 and max_abs the dequantized q * s against the exact y; the
scale's row in ULPs of the precision its amax is taken in (`scale_format`: float32, or the input
dtype where the contract rounds y to it first), at the exact scale.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from normdiff.harness.data import quant
from normdiff.harness.data.budgets import budget_for, rounding_rule
from normdiff.harness.data.dtypes import get_format
from normdiff.harness.data.ops import quantize
from normdiff.harness.engine.judge import Measurement, digest
from normdiff.text import general, number, precise

F32 = get_format("float32")
U32 = 2.0 ** -24  # a float32 rounding's relative error, at most
RECIPROCAL = 2.0 * U32  # 1 / s rounded, then the product rounded: what multiplying by it may add
GLOBAL = 4.0 * U32  # NVFP4's q = y * (1 / (s * (1 / g))): four roundings; its scale g * (amax * (1 / 6)): three


@dataclass
class QuantReference:
    """One quantizing call's exact results and the brackets the judge holds each output to."""

    fmt: quant.QuantFormat
    contract: object
    y: np.ndarray  # exact y, float64 (rows, width)
    y_lo: np.ndarray
    y_hi: np.ndarray
    scale: np.ndarray  # exact scale, float64 (rows, blocks)
    scale_lo: np.ndarray
    scale_hi: np.ndarray
    q: np.ndarray  # exact q at the exact scale
    scale_unit: object = F32  # the FloatFormat a scale's error is counted in (`scale_format`)
    output: str = "q"  # the output this reference is the case of (q and scale share one call)
    given: float | None = None  # the case's per-tensor scale (ops/quantize.given_scale), if it gives one
    floor: None = None  # (no ULP floor: the pairs table asks every reference for one)

    @property
    def exact(self) -> np.ndarray:
        """The case's exact output: q at the exact scale, or the exact scale."""
        return self.q if self.output == "q" else self.scale

    @property
    def per_tensor(self) -> bool:
        """Whether the scale is the one the case gives (static FP8): one for the whole tensor."""
        return self.given is not None and self.contract.tensor_scale != "global"

    def divisor(self, scale: np.ndarray) -> np.ndarray:
        """What q divides y by, given a stored scale (ops/quantize.divisor)."""
        return quantize.divisor(scale, self.contract, self.given)


def reference(case, inputs, exact: dict) -> QuantReference:
    """The brackets of a quantizing case (module docstring)."""
    c = case.contract
    y = exact["y"]
    rule = rounding_rule(c)
    n = y.shape[-1]
    slack = budget_for("float32", c.op, n, 0.0, "y", rule) * F32.ulp(y)
    if c.quant_input == "input" and case.dtype != "float32":
        slack = slack + budget_for(case.dtype, c.op, n, 0.0, "y", rule) * get_format(case.dtype).ulp(y)
    slack = np.where(y == 0, 0.0, slack)  # an exact 0 (a zero row, a zero weight) is 0 in every rounding
    y_lo, y_hi = y - slack, y + slack
    lo_src = quantize.amax_source(y_lo, c, inputs.arrays)
    hi_src = quantize.amax_source(y_hi, c, inputs.arrays)
    low_mag = np.where(lo_src * hi_src > 0, np.minimum(np.abs(lo_src), np.abs(hi_src)), 0.0)
    high_mag = np.maximum(np.abs(lo_src), np.abs(hi_src))
    a_lo = quantize.blocks(low_mag, c.quant_group).max(axis=-1)
    a_hi = quantize.blocks(high_mag, c.quant_group).max(axis=-1)
    given = quantize.given_scale(inputs.arrays)
    if given is not None and c.tensor_scale != "global":  # the case's own scale: exact
        s_lo = s_hi = exact["scale"]
    else:
        # amax / max rounded in float32 (and a float32 floor constant): either way by one rounding each,
        # NVFP4's g * amax / 6 by three (a zero block's power-of-two scale is 1, not the limit of a
        # tiny one's: the ends may swap)
        g, k = (1.0, 2 * U32) if given is None else (given, GLOBAL)
        ends = quantize.scale_of(a_lo * (1.0 - k), c, g), quantize.scale_of(a_hi * (1.0 + k), c, g)
        s_lo, s_hi = np.minimum(*ends), np.maximum(*ends)
        if c.scale_rounding == "none":
            s_lo, s_hi = s_lo * (1.0 - 2 * U32), s_hi * (1.0 + 2 * U32)
    return QuantReference(quant.get_format(c.quant_dtype), c, y, y_lo, y_hi, exact["scale"], s_lo, s_hi, exact["q"],
                          scale_format(c, case.dtype), given=given)


def scale_shaped(scale, ref: QuantReference) -> np.ndarray:
    """An implementation's scales as (rows, blocks): (rows,), (rows, 1) and the flat (rows * blocks,)
    taken as they are laid out, and a per-tensor scale as one value; anything else raises, naming
    the shape expected."""
    a = np.asarray(scale)
    want = ref.scale.shape
    if ref.per_tensor and a.size == 1:
        return np.broadcast_to(a.reshape(()), want)
    if a.size != int(np.prod(want)):
        raise ValueError(f"scale has shape {a.shape}; this contract gives one scale per "
                         f"{'row' if want[-1] == 1 else 'block'}: shape {want}")
    return a.reshape(want)


def scale_format(contract, dtype: str):
    """The precision a scale's error is counted in: that of the y its amax is taken of (the input
    dtype where the contract rounds y to it before quantizing, else float32), so that one legal
    rounding of that y is about one ULP of the scale; an E4M3 block scale's in E4M3's own."""
    if quantize.scale_bits(contract) != "e8m0":  # NVFP4's E4M3 block scale
        return quant.get_format("float8_e4m3fn").as_float_format()
    return get_format(dtype if contract.quant_input == "input" else "float32")


def judge_scale(out, ref: QuantReference) -> Measurement:
    s = scale_shaped(quant.decode(out, quantize.scale_encoding(out, ref.contract)), ref)
    m = Measurement(outcome="agree", output_dtype=str(np.asarray(out).dtype), output_digest=digest(np.asarray(out)))
    finite = np.isfinite(s)
    m.nan_count, m.inf_count = int(np.isnan(s).sum()), int(np.isinf(s).sum())
    unit = ref.scale_unit.ulp(ref.scale)
    ulps = np.abs(s - ref.scale) / unit
    m.max_ulp = float(ulps[finite].max()) if finite.any() else float("nan")
    m.tolerance_ulp = float(np.max(np.maximum(ref.scale_hi - ref.scale, ref.scale - ref.scale_lo) / unit))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = s / ref.scale
    usable = ratio[np.isfinite(ratio)]
    m.scale_ratio = float(np.median(usable)) if usable.size else float("nan")
    outside = ~((s >= ref.scale_lo) & (s <= ref.scale_hi))
    m.off_chain = float(outside.mean())
    m.chain_identical = float((s == F32.round(ref.scale)).mean())
    if not finite.all():
        m.outcome = "nan_mismatch"
        m.detail = f"{int((~finite).sum())} of {s.size} scales are not finite"
    elif outside.any():
        m.outcome = "disagree"
        m.detail = (f"{int(outside.sum())} of {s.size} scales outside what a legal float32 pipeline gives "
                    f"(median {number(m.scale_ratio, 4)} x the contract's)")
    elif m.chain_identical == 1.0:
        m.outcome = "identical"
    return m


def judge_q(out, scale_out, ref: QuantReference) -> Measurement:
    raw = np.asarray(out)
    q = quant.decode(raw, ref.fmt)
    if q.shape != ref.y.shape:
        raise ValueError(f"q has shape {q.shape}, expected {ref.y.shape}")
    m = Measurement(outcome="agree", output_dtype=str(raw.dtype), output_digest=digest(raw))
    s = ref.divisor(usable_scale(scale_out, ref))
    c = ref.contract
    t = quantize.quotient(ref.y, s, c)
    fmt = ref.fmt
    q_lo, q_hi = legal_codes(ref, s)
    q_at = quantize.rounded(t, c).reshape(q.shape)  # y / (your scale), rounded once
    finite = np.isfinite(q)
    m.nan_count, m.inf_count = int(np.isnan(q).sum()), int(np.isinf(q).sum())
    informative = np.repeat(s != 0, q.shape[-1] // s.shape[-1], axis=-1)  # (a zero scale's codes: any, legal_codes)
    spacing = fmt.spacing(np.maximum(np.abs(np.where(finite, q, 0.0)), np.abs(q_at)))
    ulps = np.where(informative, np.abs(np.where(finite, q, q_at) - q_at) / spacing, 0.0)
    m.max_ulp = float(ulps.max()) if ulps.size else 0.0
    m.p99_ulp = float(np.quantile(ulps, 0.99)) if ulps.size else 0.0
    width = (q_hi - q_lo) / fmt.spacing(np.maximum(np.abs(q_lo), np.abs(q_hi)))
    m.tolerance_ulp = float(width[informative].max()) if informative.any() else 0.0
    legal_nonfinite = ~np.isfinite(q_lo) | ~np.isfinite(q_hi)  # an unclamped or unguarded contract's own
    outside = outside_codes(q, q_lo, q_hi)
    m.off_chain = float(outside.mean())
    m.chain_identical = float((q == ref.q).mean())
    _dequantized(m, q, s, ref)
    if (~finite & ~legal_nonfinite).any():
        m.outcome = "nan_mismatch"
        m.detail = (f"{int((~finite).sum())} of {q.size} values are NaN or inf where the format's value is "
                    f"finite (at |y / scale| up to {number(np.nanmax(np.abs(t)), 4)}; {fmt.name} max {general(fmt.max)})")
    elif outside.any():
        m.outcome = "disagree"
        i = np.flatnonzero(outside.reshape(-1))[0]
        m.detail = (f"{int(outside.sum())} of {q.size} values outside what a legal float32 pipeline gives with "
                    f"your scale (e.g. y / scale = {precise(t.reshape(-1)[i])}: yours {general(q.reshape(-1)[i])}, legal "
                    f"{general(q_lo.reshape(-1)[i])} .. {general(q_hi.reshape(-1)[i])})")
    elif m.chain_identical == 1.0:
        m.outcome = "identical"
    return m


def legal_codes(ref: QuantReference, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The lowest and highest code a legal float32 pipeline writes for each element given the scale
    `s` (rows, blocks): Q(y_lo / s) .. Q(y_hi / s), the quotient widened by a float32 reciprocal's
    rounding (NVFP4's four roundings); `s` what y is divided by (QuantReference.divisor); shaped like y.
    Where the scale is 0 (a zero row, an E4M3 block scale that underflows) every finite code is
    legal: each dequantizes to the same 0, which is all the next matmul sees (Transformer Engine's
    NVFP4 writes +-6 there, TensorRT-LLM's 0); a NaN or inf there still is not."""
    c = ref.contract
    t_lo = quantize.quotient(ref.y_lo, s, c)
    t_hi = quantize.quotient(ref.y_hi, s, c)
    widen = (RECIPROCAL if ref.given is None else GLOBAL) * np.maximum(np.abs(t_lo), np.abs(t_hi))
    q_lo = quantize.rounded(t_lo - widen, c).reshape(ref.y.shape)
    q_hi = quantize.rounded(t_hi + widen, c).reshape(ref.y.shape)
    if c.zero_guard:  # (without the guard a zero scale is the contract's own 0 / 0: NaN)
        zero = np.repeat(np.asarray(s) == 0, ref.y.shape[-1] // np.asarray(s).shape[-1], axis=-1)
        q_lo, q_hi = np.where(zero, ref.fmt.low, q_lo), np.where(zero, ref.fmt.max, q_hi)
    return q_lo, q_hi


def outside_codes(q: np.ndarray, q_lo: np.ndarray, q_hi: np.ndarray) -> np.ndarray:
    """Which codes lie outside their legal bracket (`legal_codes`): a NaN or inf is legal only where
    the contract's own bracket is not finite (an unclamped or unguarded contract)."""
    legal_nonfinite = ~np.isfinite(q_lo) | ~np.isfinite(q_hi)
    with np.errstate(invalid="ignore"):
        return ~((q >= q_lo) & (q <= q_hi)) & ~(legal_nonfinite & ~np.isfinite(q))


def usable_scale(scale_out, ref: QuantReference) -> np.ndarray:
    """The implementation's scale per block where it is one (finite, >= 0), else the exact one: q
    is judged with the scale it was quantized with, and a scale that is not one is its own row's
    failure."""
    try:
        s = scale_shaped(quant.decode(scale_out, quantize.scale_encoding(scale_out, ref.contract)), ref)
    except (ValueError, TypeError):
        return ref.scale
    return np.where(np.isfinite(s) & (s >= 0), s, ref.scale)



def _dequantized(m: Measurement, q: np.ndarray, s: np.ndarray, ref: QuantReference) -> None:
    """The dequantized q * s against the exact y: what the next matmul sees."""
    deq = quantize.blocks(np.where(np.isfinite(q), q, 0.0), ref.contract.quant_group) * s[..., None]
    deq = deq.reshape(q.shape)
    err = deq - ref.y
    norm = float(np.sqrt(np.sum(ref.y * ref.y)))
    m.max_abs = float(np.abs(err).max()) if err.size else 0.0
    m.rel_l2 = float(np.sqrt(np.sum(err * err)) / norm) if norm else float("nan")
    d, y = deq.reshape(-1), ref.y.reshape(-1)
    # sums of products, not BLAS (np.linalg.norm, @): slow here (judge.py says why)
    denom = float(np.sqrt(np.sum(d * d) * np.sum(y * y)))
    m.cosine = float(np.sum(d * y) / denom) if denom else float("nan")
    m.rms_ratio = float(np.sqrt(np.mean(d * d)) / np.sqrt(np.mean(y * y))) if np.any(y) else float("nan")
