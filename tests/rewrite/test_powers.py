"""Constant powers as products (canonicalize's pow_integer_to_products, pow_one_and_a_half):
compiled programs against numpy's power on the values where pow and products could part:
negative, zero and -0.0, NaN, infinities, overflow and underflow, every integer width."""

import numpy as np
import pytest

import verglas as vg

_FLOATS = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -3.0, 1.7, -2.3, 1e-3, 7e-40, 1e-200, 1e30,
           -1e30, 1e150, 1e300, -1e300, np.inf, -np.inf, np.nan]
_EXPONENTS = [3, 4, 5, 7, 16, 1.5]


def _compiled(dtype, exponent):
    x = vg.tensor("x", shape=(None,), dtype=dtype)
    return vg.compile([x], x ** exponent)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("exponent", _EXPONENTS)
def test_float_powers_match_numpy(dtype, exponent):
    with np.errstate(over="ignore"):  # (1e300 in float32 is inf)
        data = np.array(_FLOATS, dtype=dtype)
    f = _compiled(dtype, exponent)
    with np.errstate(all="ignore"):
        want = np.power(data, np.asarray(exponent, dtype))
    got = np.asarray(f(data))
    assert got.dtype == want.dtype
    finite = np.isfinite(want) & (want != 0)
    np.testing.assert_allclose(got[finite], want[finite], rtol=4 * np.finfo(dtype).eps * exponent)
    rest = ~finite
    assert np.array_equal(got[rest], want[rest], equal_nan=True), (data[rest], got[rest])
    zeros = rest & (want == 0)
    assert np.array_equal(np.signbit(got[zeros]), np.signbit(want[zeros]))


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16", "int32", "uint32",
                                   "int64", "uint64"])
@pytest.mark.parametrize("exponent", [3, 4, 7, 16])
def test_integer_powers_wrap_as_numpy(dtype, exponent):
    info = np.iinfo(dtype)
    data = np.array([0, 1, 2, 3, 7, 100, info.max, info.max - 1, info.min, info.min + 1,
                     *([-1, -2, -3, -7] if info.min < 0 else [])], dtype=dtype)
    f = _compiled(dtype, exponent)
    with np.errstate(all="ignore"):
        want = np.power(data, np.asarray(exponent, dtype))
    np.testing.assert_array_equal(np.asarray(f(data)), want)


def test_the_powers_become_products():
    x = vg.tensor("x", shape=(None,), dtype="float32")
    text = str(vg.compile([x], [x ** 3, x ** 1.5]).program)
    assert "pow" not in text and "sqr" in text and "sqrt" in text, text
