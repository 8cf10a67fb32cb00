"""The quantized formats as exact maths (harness/data/quant.py): one correct rounding from float64,
the casts' own overflow, power-of-two scales from the bits, and what a returned array means."""
import ml_dtypes
import numpy as np
import pytest

from normdiff.harness.data import quant

FLOATS = [f for f in quant.FORMATS.values() if f.is_float]


def values(seed=0, n=100_000):
    """float32 values over every binade of the formats, their subnormals and past their max, plus
    every format's exact ties."""
    rng = np.random.default_rng(seed)
    v = (rng.standard_normal(n) * np.exp2(rng.uniform(-16, 17, n))).astype(np.float32)
    ties = np.array([1.0625, 1.1875, 3 * 2.0 ** -10, 5 * 2.0 ** -10, 0.25, 0.75, 1.25, 2.5, 5.0, 464.0, 465.0,
                     248.0, 61440.0, 6.5, -464.0, -0.75], dtype=np.float32)
    return np.concatenate([v, ties])


@pytest.mark.parametrize("fmt", FLOATS, ids=lambda f: f.name)
def test_a_float32_rounds_as_ml_dtypes_casts_it_once_and_overflows_as_its_cast(fmt):
    v = values()
    cast = v.astype(fmt.np_dtype).astype(np.float64)  # from float32: one rounding, nearest even
    mine = fmt.quantize(v.astype(np.float64), saturate=False)
    assert np.array_equal(mine, cast, equal_nan=True)
    clamped = np.clip(v, -fmt.max, fmt.max).astype(fmt.np_dtype).astype(np.float64)
    assert np.array_equal(fmt.quantize(v.astype(np.float64)), clamped)


def test_a_float64_is_rounded_once_where_ml_dtypes_rounds_twice():
    v = np.float64(1.0625 + 2.0 ** -40)  # just past the E4M3 tie between 1.0 and 1.125
    assert float(np.float64(v).astype(ml_dtypes.float8_e4m3fn)) == 1.0  # through float32: twice
    assert quant.get_format("float8_e4m3fn").quantize(v) == 1.125


def test_e4m3fn_has_no_inf_fnuz_saturates_at_240_and_e5m2_overflows_to_inf():
    fn, fnuz, e5m2 = (quant.get_format(n) for n in ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2"))
    assert fn.quantize(np.array([464.0]), saturate=False)[0] == 448.0  # the tie rounds down to max
    assert np.isnan(fn.quantize(np.array([465.0]), saturate=False)[0])
    assert np.isnan(fnuz.quantize(np.array([248.0]), saturate=False)[0]) and fnuz.quantize(np.array([248.0]))[0] == 240
    assert np.isinf(e5m2.quantize(np.array([61440.0]), saturate=False)[0])


def test_int8_rounds_to_nearest_even_or_as_the_bugs_do_and_holds_minus_128():
    i8 = quant.get_format("int8")
    t = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 3.7, -3.7, 126.6, -128.4, -300.0])
    assert i8.quantize(t).tolist() == [0, 2, 2, -0, -2, 4, -4, 127, -128, -128]
    assert i8.quantize(t, rounding="truncate").tolist()[:7] == [0, 1, 2, -0, -2, 3, -3]
    assert i8.quantize(t, rounding="half_away").tolist()[:5] == [1, 2, 3, -1, -3]


def test_power_of_two_exponents_come_from_the_bits():
    v = np.array([1.0, 1.0 + 2.0 ** -52, 1.5, 2.0, 0.75, 2.0 ** -130, 3e38])
    assert quant.pow2_exponent(v, "ceil").tolist() == [0, 1, 1, 1, 0, -127, 127]
    assert quant.pow2_exponent(v, "floor").tolist() == [0, 0, 0, 1, -1, -127, 127]


def test_decode_takes_the_format_its_raw_bits_or_an_e8m0_byte_and_names_what_it_takes():
    fn = quant.get_format("float8_e4m3fn")
    q = np.array([1.0, -448.0, 0.015625], dtype=np.float32).astype(fn.np_dtype)
    assert quant.decode(q, fn).tolist() == [1.0, -448.0, 0.015625]
    assert quant.decode(q.view(np.uint8), fn).tolist() == [1.0, -448.0, 0.015625]
    assert quant.decode(np.array([127, 130, 0xFF], np.uint8), "e8m0")[:2].tolist() == [1.0, 8.0]
    assert np.isnan(quant.decode(np.array([0xFF], np.uint8), "e8m0")[0])
    e2m1 = quant.get_format("float4_e2m1fn")
    assert quant.decode(np.array([0x7, 0xF], np.uint8), e2m1).tolist() == [6.0, -6.0]
    with pytest.raises(ValueError, match="return them as float8_e4m3fn or their raw bits as uint8"):
        quant.decode(np.ones(3, np.float32), fn)
    with pytest.raises(ValueError, match="return float8_e8m0fnu, its biased exponent as uint8"):
        quant.decode(np.ones(3, np.int16), "e8m0")
