"""Accuracy, numpy edge cases and SIMD code of the vectorizable math kernels."""

import functools
import math

import numba
import numpy as np
import pytest
import scipy.special

from verglas.cpu_backend.vmath import FASTMATH, VMATH

UNARY = ["exp", "expm1", "log", "log1p", "sin", "cos", "tan", "tanh", "sigmoid", "softplus",
         "erf"]
DTYPES = ["float32", "float64"]
# Max error in ulp of the result: float64 against a long-double reference, float32 against
# the exact float64 value (native float32 kernels: <= 2 ulp; tan, softplus and erf round a
# float64 result once, so ~0.5 ulp).
MAX_ULP = {"float32": 2.0, "float64": 4.0}
# Kernels computed natively in float32 (8 lanes per 256-bit vector).
NATIVE_F32 = ["exp", "expm1", "log", "log1p", "sin", "cos", "tanh", "sigmoid"]
SPECIALS = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 5e-324, -5e-324, 1e-310, 1e300,
            -1e300, 3.4e38, -3.4e38, 1e-45]


# The flags of the CPU backend's program function, which the inlined kernels inherit.
BACKEND_FLAGS = frozenset({"nsz", "arcp", "contract", "reassoc"})


@functools.cache
def _unary_loop(name, dtype, flags=FASTMATH):
    """One njit loop per kernel, compiled once: out[i] = f(x[i])."""
    f = VMATH[(name, dtype)]

    @numba.njit(fastmath=set(flags), error_model="numpy")
    def loop(x, out):
        for i in range(x.shape[0]):
            out[i] = f(x[i])

    return loop


def run(name, x, flags=FASTMATH):
    """Apply VMATH[name] to every element of x."""
    out = np.empty_like(x)
    _unary_loop(name, x.dtype.name, flags)(x, out)
    return out


def reference(name, x):
    """Exact-enough values: numpy in long double (80-bit), libm erf in double."""
    xl = np.asarray(x, np.float64).astype(np.longdouble)
    with np.errstate(all="ignore"):
        if name == "sigmoid":
            return 1 / (1 + np.exp(-xl))
        if name == "softplus":
            return np.logaddexp(xl, np.longdouble(0))
        if name == "erf":
            return scipy.special.erf(np.asarray(x, np.float64)).astype(np.longdouble)
        return getattr(np, name)(xl)


def inputs(name, dtype, n=20_000):
    """Random inputs over the function's whole interesting range, plus values near 0."""
    rng = np.random.default_rng(42)
    u = rng.uniform
    big = 104.0 if dtype == "float32" else 745.0
    decades = 37 if dtype == "float32" else 300
    tiny = np.sign(u(-1, 1, n)) * 10 ** u(-decades, 0, n)
    ranges = {
        "exp": [u(-big, big, n)],
        "expm1": [u(-50, big, n)],
        "log": [10 ** u(-decades - 8, decades, n), u(0, 4, n)],
        "log1p": [u(-1, 1, n), 10 ** u(-decades, decades, n)],
        "sin": [u(-1e5, 1e5, n), u(-10, 10, n)],
        "tanh": [u(-30, 30, n)],
        "sigmoid": [u(-big, big, n)],
        "softplus": [u(-big, big, n), u(-5, 5, n)],
        "erf": [u(-7, 7, n), u(-1.2, 1.2, n)],
    }
    ranges["cos"] = ranges["tan"] = ranges["sin"]
    with np.errstate(over="ignore"):
        return np.concatenate([*ranges[name], tiny]).astype(dtype)


def assert_ulp(got, ref, dtype, max_ulp):
    """Check got against the long-double ref: ulp error in range, exact specials elsewhere."""
    ref = np.asarray(ref, np.longdouble)
    ref_t = ref.astype(dtype)  # reference rounded to the output type
    special = ~np.isfinite(ref_t) | (ref_t == 0)
    np.testing.assert_array_equal(got[special], ref_t[special])
    signed = special & ~np.isnan(ref_t)  # numpy does not define the sign of nan
    np.testing.assert_array_equal(np.signbit(got[signed]), np.signbit(ref_t[signed]))
    # Subnormal results are judged in units of the smallest subnormal.
    ulp = np.maximum(np.spacing(np.abs(ref_t)), np.finfo(dtype).smallest_subnormal)
    err = np.abs(got.astype(np.longdouble) - ref) / ulp.astype(np.longdouble)
    worst = int(np.argmax(np.where(special, 0, err)))
    assert err[~special].max() <= max_ulp, (got[worst], ref[worst], err[worst])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", UNARY)
def test_accuracy(name, dtype):
    """Random inputs stay within MAX_ULP of the exact result."""
    x = inputs(name, dtype)
    # libm's erf is itself ~1 ulp off, so the float64 erf tolerance absorbs that.
    max_ulp = MAX_ULP[dtype] + (1.0 if name == "erf" else 0.0)
    assert_ulp(run(name, x), reference(name, x), dtype, max_ulp)


@pytest.mark.parametrize("name", UNARY)
def test_accuracy_under_backend_flags(name):
    """Inlined into a 'reassoc'/'nsz'/'arcp' caller, the float64 kernels stay accurate."""
    x = inputs(name, "float64", n=5000)
    got, ref = run(name, x, BACKEND_FLAGS), reference(name, x)
    finite = np.isfinite(ref) & (ref != 0)
    max_ulp = MAX_ULP["float64"] + (1.0 if name == "erf" else 0.0)
    assert_ulp(got[finite], ref[finite], "float64", max_ulp)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))


@pytest.mark.parametrize("name", NATIVE_F32)
def test_float32_accuracy_under_backend_flags(name):
    """The native float32 kernels stay within 2 ulp inside a backend-flags loop, on ranges
    around the reduction and branch boundaries, and keep numpy's non-finite results."""
    rng = np.random.default_rng(7)
    u, n = rng.uniform, 20_000
    extra = {
        "exp": [u(-104, 89, n), u(-1, 1, n)],
        "expm1": [u(-20, 89, n), u(-1.1, 1.1, n)],
        "log": [u(0.5, 1.5, n), 10 ** u(-45, 38.5, n)],
        "log1p": [u(-1, 1, n), u(-0.5, 2.5, n), -(10 ** u(-45, 0, n))],
        "sin": [u(-2.6e5, 2.6e5, n), u(-4, 4, n)],
        "tanh": [u(-10, 10, n), u(-0.7, 0.7, n)],
        "sigmoid": [u(-104, 104, n), u(-1, 1, n)],
    }
    extra["cos"] = extra["sin"]
    with np.errstate(over="ignore"):
        x = np.concatenate([inputs(name, "float32", n), *extra[name]]).astype(np.float32)
    got, ref = run(name, x, BACKEND_FLAGS), reference(name, x)
    with np.errstate(over="ignore"):
        finite = np.isfinite(ref.astype(np.float32)) & (ref != 0)
    assert_ulp(got[finite], ref[finite], "float32", MAX_ULP["float32"])
    with np.errstate(over="ignore"):
        expected = ref[~finite].astype(np.float32)
    np.testing.assert_array_equal(got[~finite], expected)


@pytest.mark.parametrize("name", NATIVE_F32)
def test_float32_is_native(name):
    """Native float32 kernels compile to 8-lane packed 'ps' code with no float64 lanes."""
    x = np.linspace(0.5, 2.0, 64, dtype=np.float32)
    run(name, x, BACKEND_FLAGS)
    loop = _unary_loop(name, "float32", BACKEND_FLAGS)
    asm = loop.inspect_asm(loop.signatures[0])
    assert "ps\t%ymm" in asm or "ps\t%zmm" in asm
    assert "vcvtps2pd" not in asm and "pd\t%ymm" not in asm and "pd\t%zmm" not in asm


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", UNARY)
def test_special_values(name, dtype):
    """nan, +-inf, +-0, subnormals and overflowing arguments behave as in numpy."""
    with np.errstate(over="ignore"):
        x = np.array(SPECIALS, dtype)
    if name in ("sin", "cos", "tan"):
        x = x[np.isnan(x) | (np.abs(x) < 1e5) | np.isinf(x)]  # beyond the documented domain
    assert_ulp(run(name, x), reference(name, x), dtype, MAX_ULP[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_exp_log_boundaries(dtype):
    """Overflow/underflow thresholds of exp and the subnormal range of log."""
    info = np.finfo(dtype)
    ln_max, ln_min = math.log(float(info.max)), math.log(float(info.smallest_subnormal))
    x = np.array([ln_max, np.nextafter(ln_max, 0), ln_max + 1e-3, ln_min, ln_min - 1,
                  ln_min + 1, math.log(float(info.tiny))], dtype)
    assert_ulp(run("exp", x), reference("exp", x), dtype, MAX_ULP[dtype])
    sub = np.array([info.smallest_subnormal, info.tiny / 3, info.tiny, info.max], dtype)
    assert_ulp(run("log", sub), reference("log", sub), dtype, MAX_ULP[dtype])


@functools.cache
def _pow_loop(dtype):
    f = VMATH[("pow", dtype)]

    @numba.njit(fastmath=set(FASTMATH))
    def loop(x, y, out):
        for i in range(x.shape[0]):
            out[i] = f(x[i], y[i])

    return loop


@pytest.mark.parametrize("dtype", DTYPES)
def test_pow(dtype):
    """x**y: accuracy on random operands and numpy's special cases on every pair of values."""
    rng = np.random.default_rng(1)
    x = (10 ** rng.uniform(-3, 3, 5000)).astype(dtype)
    y = rng.uniform(-12, 12, 5000).astype(dtype)
    out = np.empty_like(x)
    _pow_loop(dtype)(x, y, out)
    ref = np.power(x.astype(np.longdouble), y.astype(np.longdouble))
    # float64 loses |y*log(x)| * 2^-53 in the exponent (documented): at most 83 * 2^-53 here.
    assert_ulp(out, ref, dtype, 1.0 if dtype == "float32" else 200.0)

    vals = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5,
                     3.0, -3.0, 2.5, -2.5], dtype)
    xs, ys = (a.ravel() for a in np.meshgrid(vals, vals))
    out = np.empty_like(xs)
    _pow_loop(dtype)(xs, ys, out)
    with np.errstate(all="ignore"):
        expected = np.power(xs.astype(np.longdouble), ys.astype(np.longdouble))
    assert_ulp(out, expected, dtype, MAX_ULP[dtype])


@pytest.mark.parametrize("name", ["exp", "log", "sin", "tanh", "erf"])
def test_loop_is_vectorized(name):
    """The loop compiles to packed FMAs and calls no libm function."""
    run(name, np.linspace(0.5, 2.0, 64))
    loop = _unary_loop(name, "float64", FASTMATH)
    asm = loop.inspect_asm(loop.signatures[0])
    assert "vfmadd" in asm and ("pd\t%ymm" in asm or "pd\t%zmm" in asm)
    assert "exp" not in asm.replace("vexp", "") or "call" not in asm  # no libm symbol
