"""Accuracy, numpy edge cases and SIMD code of the vectorizable math kernels."""

import functools
import math
from fractions import Fraction

import numba
import numpy as np
import pytest
import scipy.special

from verglas.cpu_backend.vmath import FASTMATH, VMATH

UNARY = ["exp", "expm1", "log", "log1p", "sin", "cos", "tan", "tanh", "sigmoid", "softplus",
         "erf"]
DTYPES = ["float32", "float64"]
# Max error in ulp of the result: float64 against a long-double reference, float32 against
# the exact float64 value (test_vmath_domain.py states the bound of each function).
MAX_ULP = {"float32": 2.0, "float64": 4.0}
# Every float32 kernel is native (16 lanes per 512-bit vector), pow through float64.
NATIVE_F32 = ["exp", "expm1", "log", "log1p", "sin", "cos", "tan", "tanh", "sigmoid",
              "softplus", "erf"]
SPECIALS = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 5e-324, -5e-324, 1e-310, 1e300,
            -1e300, 3.4e38, -3.4e38, 1e-45, 1e22, 1.5e6, 3e5]


# The harshest flags a caller that inlines the kernels may have (the CPU backend's program
# functions have {"contract", "reassoc"}, test_vmath_domain.py sweeps those).
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
        "sin": [u(-1e5, 1e5, n), u(-10, 10, n), u(-1e7, 1e7, n), tiny * 1e300],
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
        "sin": [u(-2.6e5, 2.6e5, n), u(-4, 4, n), u(-1e9, 1e9, n)],
        "tanh": [u(-10, 10, n), u(-0.7, 0.7, n)],
        "sigmoid": [u(-104, 104, n), u(-1, 1, n)],
        "softplus": [u(-104, 104, n), u(-1, 1, n)],
        "erf": [u(-5, 5, n), u(0.8, 1.0, n)],
    }
    extra["cos"] = extra["tan"] = extra["sin"]
    with np.errstate(over="ignore"):
        x = np.concatenate([inputs(name, "float32", n), *extra[name]]).astype(np.float32)
    got, ref = run(name, x, BACKEND_FLAGS), reference(name, x)
    with np.errstate(over="ignore"):
        finite = np.isfinite(ref.astype(np.float32)) & (ref != 0)
    assert_ulp(got[finite], ref[finite], "float32", MAX_ULP["float32"])
    with np.errstate(over="ignore"):
        expected = ref[~finite].astype(np.float32)
    np.testing.assert_array_equal(got[~finite], expected)


def _loop_asm(loop):
    """The assembly of the loop function alone (not the slow-path functions linked in)."""
    asm = loop.inspect_asm(loop.signatures[0])
    start = asm.index(loop.overloads[loop.signatures[0]].fndesc.mangled_name + ":")
    return asm[start:asm.index(".Lfunc_end", start)]


@pytest.mark.parametrize("name", NATIVE_F32)
def test_float32_is_native(name):
    """Native float32 kernels compile to packed 'ps' code with no float64 lanes."""
    x = np.linspace(0.5, 2.0, 64, dtype=np.float32)
    run(name, x, BACKEND_FLAGS)
    asm = _loop_asm(_unary_loop(name, "float32", BACKEND_FLAGS))
    assert "ps\t%ymm" in asm or "ps\t%zmm" in asm
    assert "vcvtps2pd" not in asm and "pd\t%ymm" not in asm and "pd\t%zmm" not in asm


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", UNARY)
def test_special_values(name, dtype):
    """nan, +-inf, +-0, subnormals and overflowing arguments behave as in numpy."""
    with np.errstate(over="ignore"):
        x = np.array(SPECIALS, dtype)
    assert_ulp(run(name, x), reference(name, x), dtype, MAX_ULP[dtype])


@pytest.mark.parametrize("flags", [FASTMATH, frozenset({"contract", "reassoc"})])
def test_signed_zeros(flags):
    """-0.0 in, -0.0 out where numpy's is -0.0, also in a 'reassoc' loop."""
    for dtype in DTYPES:
        z = np.full(32, -0.0, dtype)
        for name in ("sin", "tan", "tanh", "expm1", "log1p", "erf"):
            out = run(name, z, flags)
            assert (out == 0).all() and np.signbit(out).all(), (name, dtype)
        x = np.array([-0.0, -0.0, -0.0, 0.0, -0.0, -np.inf, -np.inf] * 4, dtype)
        y = np.array([3.0, -3.0, 2.0, 3.0, 0.5, 3.0, -3.0] * 4, dtype)
        out = np.empty_like(x)
        _pow_loop(dtype, flags)(x, y, out)
        with np.errstate(divide="ignore"):
            expected = np.power(x, y)
        np.testing.assert_array_equal(out, expected)
        np.testing.assert_array_equal(np.signbit(out), np.signbit(expected))


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
def _pow_loop(dtype, flags=FASTMATH):
    f = VMATH[("pow", dtype)]

    @numba.njit(fastmath=set(flags), error_model="numpy")
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
    assert_ulp(out, ref, dtype, 0.52)

    vals = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5,
                     3.0, -3.0, 2.5, -2.5], dtype)
    xs, ys = (a.ravel() for a in np.meshgrid(vals, vals))
    out = np.empty_like(xs)
    _pow_loop(dtype)(xs, ys, out)
    with np.errstate(all="ignore"):
        expected = np.power(xs.astype(np.longdouble), ys.astype(np.longdouble))
    assert_ulp(out, expected, dtype, MAX_ULP[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_pow_exact_integer_powers(dtype):
    """x**n equals the exact value, bit for bit, whenever that value is representable, and
    so equals numpy's float64 pow there (3.0**2 == 9.0, 2.0**-1074, (-3.0)**3, 0.5**2)."""
    xs = np.concatenate([np.arange(-40, 41), [0.5, 0.25, 1.5, -1.5, 0.125, 2.5, 0.75, 1024.0,
                                               2.0**-30, 3 * 2.0**-40, -0.5]])
    ys = np.arange(-80, 81)
    if dtype == "float64":
        ys = np.concatenate([ys, [-1074, -1022, 1023, 512]])
    x, y = (a.ravel().astype(dtype) for a in np.meshgrid(xs, ys))
    out = np.empty_like(x)
    _pow_loop(dtype)(x, y, out)
    info = np.finfo(dtype)
    checked = 0
    for xi, yi, oi in zip(x.tolist(), y.tolist(), out.tolist()):
        if xi == 0:
            continue
        v = Fraction(xi) ** int(yi)
        if not (info.smallest_subnormal <= abs(v) <= info.max):
            continue
        with np.errstate(over="ignore", under="ignore"):
            exact = float(np.dtype(dtype).type(float(v)))
        if Fraction(exact) == v:  # representable
            checked += 1
            assert oi == exact, (xi, yi, oi, exact)
            assert oi == float(np.power(np.float64(xi), np.float64(yi)))
    assert checked > 1000
    out = np.empty(4, dtype)
    _pow_loop(dtype)(np.array([10.0] * 4, dtype), np.array([-1.0] * 4, dtype), out)
    assert abs(float(out[0]) - 0.1) <= 0.5 * np.spacing(np.dtype(dtype).type(0.1))


@pytest.mark.parametrize("dtype", DTYPES)
def test_pow_is_vectorized(dtype):
    """The pow loop compiles to packed code and calls no libm pow."""
    x = np.linspace(0.5, 2.0, 64).astype(dtype)
    out = np.empty_like(x)
    loop = _pow_loop(dtype)
    loop(x, x, out)
    asm = _loop_asm(loop)
    assert "vfmadd" in asm and ("pd\t%zmm" in asm or "pd\t%ymm" in asm)  # (float32: in float64)
    assert "call" not in asm


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["sin", "cos", "tan"])
def test_trig_slow_path_is_per_vector(name, dtype):
    """Vectorized sin/cos/tan loops call the vector variant of the slow-path function once
    per vector, which tests the whole vector before any scalar Payne-Hanek work."""
    run(name, np.linspace(0.5, 2.0, 64).astype(dtype))
    loop = _unary_loop(name, dtype, FASTMATH)
    llvm = loop.inspect_llvm(loop.signatures[0])
    start = llvm.index("@" + loop.overloads[loop.signatures[0]].fndesc.mangled_name + "(")
    body = llvm[start:llvm.index("\n}\n", start)]
    suffix = "f64" if dtype == "float64" else "f32"
    assert f"@vg_{name}_{suffix}_v" in body  # e.g. vg_sin_f64_v8 on <8 x double>


@pytest.mark.parametrize("name", ["exp", "log", "sin", "tanh", "erf"])
def test_loop_is_vectorized(name):
    """The loop compiles to packed FMAs and calls no libm function."""
    run(name, np.linspace(0.5, 2.0, 64))
    loop = _unary_loop(name, "float64", FASTMATH)
    asm = loop.inspect_asm(loop.signatures[0])
    assert "vfmadd" in asm and ("pd\t%ymm" in asm or "pd\t%zmm" in asm)
    assert "exp" not in asm.replace("vexp", "") or "call" not in asm  # no libm symbol
