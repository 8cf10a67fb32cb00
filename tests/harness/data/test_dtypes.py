import ml_dtypes
import numpy as np
import pytest

from normdiff.harness.data.dtypes import format_of, get_format


@pytest.mark.parametrize("name, ulp_at_one", [("float32", 2.0**-23), ("bfloat16", 2.0**-7), ("float16", 2.0**-10)])
def test_ulp_at_one_and_its_binade(name, ulp_at_one):
    fmt = get_format(name)
    assert fmt.ulp(np.array([1.0, 1.999, -1.5, 2.0])).tolist() == [ulp_at_one] * 3 + [2 * ulp_at_one]


@pytest.mark.parametrize("name", ["float32", "bfloat16", "float16"])
def test_ulp_is_the_real_spacing_of_the_format(name):
    fmt = get_format(name)
    values = np.array([1e-3, 0.37, 3.0, 700.0, 6e-5])
    nxt = np.nextafter(values.astype(fmt.np_dtype).astype(np.float32), np.float32(np.inf)) if name == "float32" else None
    spacing = fmt.ulp(values)
    rounded = values.astype(fmt.np_dtype)
    up = (rounded.astype(np.float64) + spacing).astype(fmt.np_dtype)
    # one ulp up is the next representable number, half an ulp rounds back (ties to even aside)
    assert np.all(up.astype(np.float64) > rounded.astype(np.float64))
    assert np.all((rounded.astype(np.float64) + 0.49 * spacing).astype(fmt.np_dtype) == rounded)
    if nxt is not None:
        np.testing.assert_array_equal(nxt - rounded, spacing.astype(np.float32))


def test_fp16_subnormal_spacing_is_constant():
    fmt = get_format("float16")
    assert fmt.ulp(np.array([1e-7, 3e-6, 0.0])).tolist() == [2.0**-24] * 3


@pytest.mark.parametrize("name", ["float32", "bfloat16", "float16", "float64"])
def test_ulp_is_frexps_definition_bit_for_bit(name):
    """ulp() reads the exponent from the float64 bits; it must equal the definition by frexp and
    ldexp everywhere: zeros, float64 and format subnormals, binade edges, Inf and NaN, scalars."""
    fmt = get_format(name)

    def by_frexp(values):
        mag = np.abs(np.asarray(values, dtype=np.float64))
        exp = np.frexp(mag)[1]
        return np.ldexp(1.0, np.where(mag == 0, fmt.min_exponent, np.maximum(exp - 1, fmt.min_exponent))
                        - fmt.mantissa_bits)

    edges = np.ldexp(1.0, np.arange(-1074, 1024))
    values = np.concatenate([edges, np.nextafter(edges, 0), np.nextafter(edges, np.inf), -edges,
                             np.random.default_rng(0).integers(0, 2**64, 10000, dtype=np.uint64).view(np.float64),
                             [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324]])
    assert fmt.ulp(values).view(np.uint64).tolist() == by_frexp(values).view(np.uint64).tolist()
    for scalar in (0.0, 1.5, 1e-40, np.inf, np.nan):
        got, want = fmt.ulp(scalar), by_frexp(scalar)
        assert type(got) is type(want) and np.float64(got).view(np.uint64) == np.float64(want).view(np.uint64)


def test_aliases_and_errors():
    assert get_format("bf16").np_dtype == np.dtype(ml_dtypes.bfloat16)
    assert format_of(np.zeros(2, np.float16)).name == "float16"
    with pytest.raises(ValueError, match="unknown dtype 'int8'"):
        get_format("int8")
    with pytest.raises(ValueError, match="not a floating dtype"):
        format_of(np.zeros(2, np.int32))
