"""Dtype names, NumPy dtypes (bfloat16 through ml_dtypes) and units in the last place.

Errors are measured in ULPs of the implementation's *output dtype* at the reference value, so a
budget means the same thing at every magnitude and in every precision.
"""
from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from normdiff.harness.data.errors import UsageError
from normdiff.harness.data.names import unknown


_EXPONENT_BITS = np.uint64(0x7FF0000000000000)  # a float64's exponent field


@dataclass(frozen=True)
class FloatFormat:
    name: str
    short: str
    np_dtype: np.dtype
    mantissa_bits: int  # stored fraction bits
    min_exponent: int  # exponent of the smallest normal number

    def ulp(self, values: np.ndarray) -> np.ndarray:
        """Spacing of this format at |values| (float64 in, float64 out; subnormals included):
        2 ** (max(e, min_exponent) - mantissa_bits) for |values| in [2**e, 2**(e + 1)).

        Taken from the float64 bits rather than frexp and ldexp, which cost three times as much
        (the pairs table asks for thousands of arrays): clearing a finite magnitude's fraction
        bits leaves 2**e (0 for zeros and float64 subnormals, which the clamp to min_exponent
        covers), and scaling by a power of two is exact."""
        mag = np.abs(np.asarray(values, dtype=np.float64))
        power = (mag.view(np.uint64) & _EXPONENT_BITS).view(np.float64)
        spacing = np.maximum(power, 2.0 ** self.min_exponent) * 2.0 ** -self.mantissa_bits
        beyond = np.isinf(power)  # inf and NaN: frexp's exponent 0, as before (a spacing at 0.5)
        if beyond.any():  # ([()]: a scalar stays a scalar, as ldexp returned it)
            spacing = np.where(beyond, 2.0 ** (-1 - self.mantissa_bits), spacing)[()]
        return spacing

    @property
    def overflow(self) -> float:
        """The least magnitude that rounds to inf: the largest finite value plus half its ulp."""
        largest = float(ml_dtypes.finfo(self.np_dtype).max)
        return largest + float(self.ulp(largest)) / 2.0

    def round(self, values: np.ndarray) -> np.ndarray:
        """Round float64 values to this format (round to nearest even), returned as float64."""
        return self.cast(values).astype(np.float64)

    def cast(self, values: np.ndarray) -> np.ndarray:
        """float64 values in this format, correctly rounded (to nearest even). ml_dtypes casts a
        float64 to bfloat16 through float32, rounding twice: a value just past a bf16 midpoint by
        less than float32 resolution lands on the midpoint, then rounds to even, the wrong way
        (1 + 2^-8 + 2^-30 gives 1). Rounding to float32 *to odd* first keeps the sticky bit, and a
        second rounding from 2 more bits than the target's is then correct (Boldo and Melquiond,
        "When double rounding is odd", 2005)."""
        values = np.asarray(values, dtype=np.float64)
        with np.errstate(over="ignore", invalid="ignore"):  # beyond the range is inf, as in a real cast
            if self.mantissa_bits >= 23 or self.np_dtype == np.float16:  # NumPy rounds these once
                return values.astype(self.np_dtype)
            return _round_bits(values, self).astype(self.np_dtype)


def _round_bits(values: np.ndarray, fmt: "FloatFormat") -> np.ndarray:
    """float64 values rounded to nearest even at `fmt`'s precision, still float64 (then exact in the
    format): the float64 bits plus half an ulp of the target less one, plus its last kept bit, with
    the dropped bits cleared (the carry moves into the exponent where it must). Where the format's
    precision shrinks (its subnormals) or a value is not finite, the round-to-odd path instead."""
    drop = np.uint64(52 - fmt.mantissa_bits)
    bits = values.view(np.uint64)
    kept = (bits >> drop) & np.uint64(1)
    rounded = ((bits + (np.uint64(1) << (drop - np.uint64(1))) - np.uint64(1) + kept) >> drop) << drop
    out = rounded.view(np.float64)
    odd = ~np.isfinite(values) | (np.abs(values) < 2.0 ** fmt.min_exponent)
    if odd.any():
        out = np.where(odd, _to_odd_float32(values).astype(fmt.np_dtype).astype(np.float64), out)
    return out


def _to_odd_float32(values: np.ndarray) -> np.ndarray:
    """float64 values in float32 rounded to odd: truncated toward zero, the last bit set where
    that was inexact (finite values only; inf and NaN as a plain cast gives them)."""
    near = values.astype(np.float32)
    back = near.astype(np.float64)
    inexact = np.isfinite(back) & (back != values)
    if not inexact.any():
        return near
    toward = np.where(inexact & (np.abs(back) > np.abs(values)), np.nextafter(near, np.float32(0)), near)
    bits = toward.view(np.uint32) | inexact.astype(np.uint32)
    return bits.view(np.float32)


FORMATS: dict[str, FloatFormat] = {
    f.name: f
    for f in (
        FloatFormat("float32", "fp32", np.dtype(np.float32), 23, -126),
        FloatFormat("bfloat16", "bf16", np.dtype(ml_dtypes.bfloat16), 7, -126),
        FloatFormat("float16", "fp16", np.dtype(np.float16), 10, -14),
        FloatFormat("float64", "fp64", np.dtype(np.float64), 52, -1022),
    )
}
_ALIASES = {f.short: f.name for f in FORMATS.values()} | {"bf16": "bfloat16", "half": "float16",
                                                           "float": "float32", "double": "float64"}


def get_format(name: str) -> FloatFormat:
    key = _ALIASES.get(str(name), str(name))
    if key not in FORMATS:
        raise UsageError(unknown("dtype", name, [*FORMATS, *_ALIASES]))
    return FORMATS[key]


def format_of(array: np.ndarray) -> FloatFormat:
    """The format of a NumPy array's dtype (raises for non-float dtypes)."""
    for fmt in FORMATS.values():
        if array.dtype == fmt.np_dtype:
            return fmt
    raise ValueError(f"output dtype {array.dtype} is not a floating dtype normdiff measures "
                     f"({', '.join(FORMATS)})")
