"""The quantized formats a quantizing norm writes (FP8, FP4, INT8) and their scales (float32, E8M0,
E4M3), as exact maths: a value rounded once to a format, a scale taken from a block's amax, and
what an implementation's returned arrays mean as numbers. Pure data and NumPy; the ops that use it
are ops/rms_norm_quant.py and ops/add_rms_norm_quant.py, and their shared maths ops/quantize.py.

Every rounding here is computed exactly in float64 and rounded once, never through ml_dtypes'
float64 -> 8-bit cast, which rounds through float32 first (measured: float64 1.0625 + 2^-40 casts to
e4m3fn 1.0 where one rounding gives 1.125). A quantizer clamps to [-max, max] before rounding, as
every fused kernel read does (vLLM's `float_to_fp8`, FlashInfer's `fmaxf(-max, fminf(x, max))`):
E4M3FN has no inf, and an unclamped cast of 465 is NaN in ml_dtypes and JAX.
"""
from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from normdiff.harness.data.dtypes import FloatFormat
from normdiff.harness.data.errors import UsageError
from normdiff.harness.data.names import unknown


@dataclass(frozen=True)
class QuantFormat:
    """A format quantized values are stored in.

    name       the dtype's name as torch, ml_dtypes and JAX spell it ("float8_e4m3fn", "int8")
    max        the largest finite magnitude (448 for E4M3FN, 240 for E4M3FNUZ, 127 for INT8)
    lowest     the most negative value (-128 for INT8; -max for the float formats)
    mantissa_bits, min_exponent   a float format's precision and smallest normal's exponent;
               None for an integer format (spacing 1 everywhere)
    np_dtype   the NumPy dtype its values come in (ml_dtypes' for the 8- and 4-bit floats)
    overflow   what a value beyond max becomes without a clamp: "nan" (E4M3FN, E4M3FNUZ: no inf),
               "inf" (E5M2), "saturate" (E2M1, INT8 casts that saturate)
    """

    name: str
    max: float
    np_dtype: np.dtype
    mantissa_bits: int | None = None
    min_exponent: int | None = None
    lowest: float | None = None
    overflow: str = "nan"

    @property
    def is_float(self) -> bool:
        return self.mantissa_bits is not None

    @property
    def low(self) -> float:
        return -self.max if self.lowest is None else self.lowest

    def spacing(self, values) -> np.ndarray:
        """The distance between neighbouring values of the format at |values| (its ULP there)."""
        if not self.is_float:
            return np.ones_like(np.asarray(values, dtype=np.float64))
        return self.as_float_format().ulp(values)

    def quantize(self, t, saturate: bool = True, rounding: str = "nearest") -> np.ndarray:
        """Each value rounded once to the format, as float64: to nearest, ties to even (or, for the
        rounding bugs, truncated toward zero or half away from zero); clamped to [low, max] first
        when `saturate`, else as the format's own cast does: rounded at the format's precision as
        if its exponent went on, and NaN (E4M3FN, E4M3FNUZ), inf (E5M2) or max (E2M1, INT8) where
        that lands beyond max (E4M3FN: 464 rounds to 448, 465 to 480, which is NaN)."""
        t = np.asarray(t, dtype=np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            if saturate:
                return self._nearest(np.clip(t, self.low, self.max), rounding)
            q = self._nearest(t, rounding)
            past = ~np.isnan(q) & ((q > self.max) | (q < self.low))
            return np.where(past, self._overflow_value(t), q)

    def _nearest(self, t: np.ndarray, rounding: str = "nearest") -> np.ndarray:
        """t rounded at the format's precision (unbounded above; inf and NaN kept)."""
        finite = np.isfinite(t)
        spacing = self.as_float_format().ulp(np.where(finite, t, 1.0)) if self.is_float else 1.0
        units = t / spacing  # exact: the spacing is a power of two
        if rounding == "truncate":
            whole = np.trunc(units)
        elif rounding == "half_away":
            whole = np.sign(units) * np.floor(np.abs(units) + 0.5)
        else:
            whole = np.rint(units)
        return np.where(finite, whole * spacing, t)

    def _overflow_value(self, t: np.ndarray) -> np.ndarray:
        if self.overflow == "inf":
            return np.sign(t) * np.inf
        if self.overflow == "saturate":
            return np.where(t < 0, self.low, self.max)
        return np.full(t.shape, np.nan)

    def as_float_format(self) -> FloatFormat:
        """The format as the judge's and the pairs table's FloatFormat (its ULP at each magnitude):
        INT8 as a format whose spacing is 1 below 128 (6 fraction bits from 2^6 up)."""
        if not self.is_float:
            return FloatFormat(self.name, self.name, self.np_dtype, 6, 6)
        return FloatFormat(self.name, self.name, self.np_dtype, self.mantissa_bits, self.min_exponent)


def _ml(name: str) -> np.dtype:
    return np.dtype(getattr(ml_dtypes, name))


FORMATS: dict[str, QuantFormat] = {
    f.name: f
    for f in (
        QuantFormat("float8_e4m3fn", 448.0, _ml("float8_e4m3fn"), 3, -6),
        QuantFormat("float8_e4m3fnuz", 240.0, _ml("float8_e4m3fnuz"), 3, -7),
        QuantFormat("float8_e5m2", 57344.0, _ml("float8_e5m2"), 2, -14, overflow="inf"),
        QuantFormat("float4_e2m1fn", 6.0, _ml("float4_e2m1fn"), 1, 0, overflow="saturate"),
        QuantFormat("int8", 127.0, np.dtype(np.int8), lowest=-128.0, overflow="saturate"),
    )
}

# an E8M0 scale's NumPy type (MX blocks, DeepSeek-V3.1's UE8M0 groups: a power of two)
E8M0 = np.dtype(ml_dtypes.float8_e8m0fnu)
E8M0_RANGE = (-127, 127)  # the exponents an E8M0 byte holds (0xff is NaN)


def get_format(name: str) -> QuantFormat:
    if name not in FORMATS:
        raise UsageError(unknown("quantized format", name, FORMATS))
    return FORMATS[name]


def pow2_exponent(values, rounding: str) -> np.ndarray:
    """log2 of a power-of-two scale chosen for positive `values`: "ceil" the least power of two >=
    the value (UE8M0 rounded up: vLLM, DeepGEMM, NVIDIA's RCEIL, MLX after #4353), "floor" the
    greatest <= it. Exact: from the float64 bits, never log2's rounding (SGLang #29954: torch's
    log2 and the bit rule disagreed). Clamped to what E8M0 holds."""
    v = np.asarray(values, dtype=np.float64)
    mantissa, exponent = np.frexp(v)  # v = mantissa * 2^exponent, mantissa in [0.5, 1)
    floor = exponent - 1
    if rounding == "floor":
        e = floor
    else:
        e = np.where(mantissa == 0.5, floor, floor + 1)
    return np.clip(e, *E8M0_RANGE).astype(np.float64)


def decode(array, fmt: str | QuantFormat) -> np.ndarray:
    """An implementation's quantized output (or scale) as float64 numbers.

    `fmt`: a quantized format, or "e8m0" / "float32" / "float8_e4m3fn" for a scale. Accepted: the
    format's own dtype (ml_dtypes' float8 / float4 types, int8), its raw bits as uint8 (one value
    per byte: E8M0's biased exponent, an FP8 code, an FP4 code in the low nibble), and for a scale
    also any float array holding the values. Anything else raises, naming what it takes."""
    a = np.asarray(array)
    name = fmt if isinstance(fmt, str) else fmt.name
    if name == "float32":
        # numbers in any float type: NumPy's, or ml_dtypes' (an NVFP4 block scale as float8_e4m3fn)
        if a.dtype.kind != "f" and not a.dtype.name.startswith("float"):
            raise ValueError(f"a float32 scale came as {a.dtype}; return it as float32")
        return a.astype(np.float64)
    if name == "e8m0":
        if a.dtype == E8M0:
            return a.astype(np.float64)
        if a.dtype == np.uint8:  # the biased exponent: 2^(byte - 127), 0xff NaN
            return np.where(a == 0xFF, np.nan, np.ldexp(1.0, a.astype(np.int64) - 127))
        if a.dtype.kind == "f":
            return a.astype(np.float64)
        raise ValueError(f"an E8M0 scale came as {a.dtype}; return float8_e8m0fnu, its biased exponent as "
                         "uint8, or the power of two as a float")
    q = get_format(name) if isinstance(fmt, str) else fmt
    if a.dtype == q.np_dtype:
        return a.astype(np.float64)
    if a.dtype == np.uint8 and q.is_float:
        bits = a if q.name != "float4_e2m1fn" else a & 0x0F
        return bits.view(q.np_dtype).astype(np.float64)
    raise ValueError(f"quantized values in {q.name} came as {a.dtype}; return them as {q.np_dtype} "
                     + ("or their raw bits as uint8" if q.is_float else "") )
