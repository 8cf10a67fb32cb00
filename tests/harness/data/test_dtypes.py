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


def test_aliases_and_errors():
    assert get_format("bf16").np_dtype == np.dtype(ml_dtypes.bfloat16)
    assert format_of(np.zeros(2, np.float16)).name == "float16"
    with pytest.raises(ValueError, match="unknown dtype 'int8'"):
        get_format("int8")
    with pytest.raises(ValueError, match="not a floating dtype"):
        format_of(np.zeros(2, np.int32))
