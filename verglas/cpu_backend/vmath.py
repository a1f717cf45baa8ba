"""Vectorizable scalar math for numba loops: no libm calls, no branches, only selects.

LLVM's loop vectorizer cannot widen a loop that calls ``math.exp`` & co. (this llvmlite has
no SVML), so each function here is plain arithmetic, comparisons turned into selects and
int/float bitcasts.  ``for i in range(n): out[i] = VMATH[("exp", "float64")](x[i])`` compiles
to packed AVX2/AVX-512 code.  exp, expm1, log, log1p, sin, cos, tanh and sigmoid have native
float32 kernels (float32 arithmetic and int32 bit tricks: 8 lanes per ymm register, <= 2 ulp);
tan, softplus, erf and pow in float32 evaluate the float64 algorithm and round once.

Measured by benchmarks/vmath_bench.py on this machine (Xeon Emerald Rapids, 2 cores, AVX-512,
numba 0.65.1): 1e6 contiguous elements in [-10, 10] (log [1e-3, 1e3], log1p [-0.9, 100],
pow x in [0.1, 10], y in [-5, 5]), ms per call, best of 20, timings +-20% noisy.  ulp: max
error over ~4e5 inputs spanning each whole domain, against numpy in long double (float32:
in float32 ulp of the exact value, so 0.5 is correctly rounded); numpy ulp: numpy's own.
``math`` is the same numba loop calling ``math.*``; numpy has no erf/sigmoid/softplus ufunc,
so those compare against scipy.special (erf, expit) and ``np.logaddexp(x, 0)``::

    function dtype    ulp  max rel  numpy ulp   vmath  numpy  math.*  (ms / 1e6)
    exp      f32     1.01  6.0e-08    2.32       0.41   0.41    3.7
    exp      f64     0.96  1.5e-16    0.68       1.37   0.74   10.2
    expm1    f32     1.60  9.5e-08    2.54       0.58   0.29   20.8
    expm1    f64     1.76  2.4e-16    0.51       1.59   1.19   25.8
    log      f32     0.85  5.1e-08    3.36       0.48   0.41    5.5
    log      f64     1.11  1.8e-16    0.60       1.37   0.92    8.7
    log1p    f32     1.43  8.5e-08    1.81       0.69   0.48   23.7
    log1p    f64     2.51  3.8e-16    0.61       1.49   1.25   24.8
    sin      f32     1.54  9.2e-08    1.48       0.48   0.53   18.8
    sin      f64     2.22  3.0e-16    0.51       1.47  34.5    36.0
    cos      f32     1.54  9.2e-08    1.46       0.45   0.47   18.7
    cos      f64     2.25  3.1e-16    0.51       1.42  33.5    34.3
    tan      f32     0.50  5.9e-08    3.18       1.16   0.47   33.4
    tan      f64     3.85  5.1e-16    0.56       1.50   1.55   41.9
    tanh     f32     1.31  7.8e-08    1.34       0.58   0.30   34.2
    tanh     f64     2.50  3.5e-16    1.14       2.11   1.57   40.4
    sigmoid  f32     2.13  1.3e-07    2.17       0.51   3.39    3.8
    sigmoid  f64     2.13  3.2e-16    1.89       1.66   9.75    9.9
    softplus f32     0.50  5.9e-08    1.43       2.85  27.7    24.0
    softplus f64     2.80  4.3e-16    1.45       8.59  32.8    22.0
    erf      f32     0.50  5.7e-08    (ref)      3.39  38.1    30.3
    erf      f64     3.00  4.1e-16    (ref)      7.45  37.9    34.5
    pow      f32     0.50  5.9e-08    0.99       3.19   0.77    9.7
    pow      f64      337  4.3e-14    0.67       7.97   2.67   24.8

float32 rows of the native kernels: measured in backend-flag loops (nsz/arcp/contract/reassoc)
against numpy float64 over 8e5-1.2e6 inputs per function, ulp of the float64 value rounded
to float32 (so max rel is ~ulp * 6e-8); math.* columns are from the older table.  tanh and
expm1 stay ~2x numpy's AVX-512 (16-lane) loops: LLVM picks 256-bit vectors here.  float32
sin/cos reduce with x * 2/pi rounded in float32 and pi/2 in three float32 parts applied with
llvm.fma (first product exact): <= 1.6 ulp for |x| < 2^18 (2.6e5), 2.3 ulp at 1e6, wrong
beyond ~1e7.  float32 kernels use llvm.fma for the steps 'reassoc' would regroup (1 + small
term in exp, f kept apart in log, e*ln2_hi + e*ln2_lo), and scale by 2^k through the
exponent field (a product 2^64 * 2^64 would be folded into inf).

Domains: sin/cos/tan use a Cody-Waite reduction with a 3-part pi/2 (33+33+53 bits), exact
products for |k| < 2^20, i.e. accurate for |x| < 1.6e6 (tested to 1e5); beyond that the
result is finite but wrong (inf/nan inputs still give nan).  pow(float64) loses
|y*log(x)| * 2^-53 relative accuracy (up to ~1e-13 near overflow); pow(float32) is exact
enough because the float64 error stays far below a float32 ulp.

Generated code calls them as functions compiled with ``FASTMATH = {"contract"}`` (FMA), what
they are written for (kernels.scalar_impl; LLVM inlines the call into the vectorized loop);
the building blocks here are ``inline="always"`` into them.  Never add 'nnan' or 'ninf' (the
NaN/inf handling relies on IEEE compares).  Should a caller inline them, the steps that a
'reassoc' caller would break (round-to-integer, Cody-Waite reductions, error-compensation
terms) avoid folding targets: rounding is ``llvm.rint`` (not the 1.5*2^52 shifter trick), the
Cody-Waite products use two SSA copies of k, and log1p needs no compensation term; so callers
compiled with {"nsz", "arcp", "contract", "reassoc"} stay accurate (checked by the tests),
though 'nsz' may turn a -0.0 result into +0.0.  Division is a bare fdiv: numba's '/' adds a
ZeroDivisionError branch under error_model="python" that blocks vectorization.
"""

import math

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.extending import intrinsic

__all__ = ["FASTMATH", "VMATH"]

FASTMATH = frozenset({"contract"})
_JIT = {"inline": "always", "fastmath": set(FASTMATH), "cache": False}

# --------------------------------------------------------------------------- bit casts


@intrinsic
def _as_int(typingctx, x):
    """Reinterpret float64/float32 bits as int64/int32."""
    ret = types.int64 if x == types.float64 else types.int32

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], context.get_value_type(ret))

    return ret(x), codegen


@intrinsic
def _as_float(typingctx, x):
    """Reinterpret int64/int32 bits as float64/float32."""
    ret = types.float64 if x == types.int64 else types.float32

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], context.get_value_type(ret))

    return ret(x), codegen


@intrinsic
def _div(typingctx, a, b):
    """a / b as a bare fdiv: numba's '/' adds a zero check that blocks vectorization."""

    def codegen(context, builder, sig, args):
        return builder.fdiv(args[0], args[1])

    return a(a, b), codegen


@intrinsic
def _rint(typingctx, x):
    """Round to the nearest integer (llvm.rint, vectorizes to vrndscale); survives 'reassoc'."""

    def codegen(context, builder, sig, args):
        fnty = ir.FunctionType(args[0].type, [args[0].type])
        fn = cgutils.get_or_insert_function(builder.module, fnty, f"llvm.rint.f{x.bitwidth}")
        return builder.call(fn, args)

    return x(x), codegen


@intrinsic
def _fma(typingctx, a, b, c):
    """a * b + c rounded once (llvm.fma, vfmadd): exact Cody-Waite steps in float32."""

    def codegen(context, builder, sig, args):
        fnty = ir.FunctionType(args[0].type, [args[0].type] * 3)
        fn = cgutils.get_or_insert_function(builder.module, fnty, f"llvm.fma.f{a.bitwidth}")
        return builder.call(fn, args)

    return a(a, b, c), codegen


def _int_op(opname: str):
    """An int32/int64 binary op that keeps the width of its first operand.

    numba widens int32 arithmetic to int64, and LLVM cannot always narrow it back, which
    halves the SIMD lanes of the float32 kernels' exponent manipulation.
    """

    @intrinsic
    def op(typingctx, a, b):
        def codegen(context, builder, sig, args):
            rhs = context.cast(builder, args[1], sig.args[1], sig.args[0])
            return getattr(builder, opname)(args[0], rhs)

        return a(a, b), codegen

    return op


_iadd, _isub, _iand, _ior, _ixor = map(_int_op, ("add", "sub", "and_", "or_", "xor"))
_shl, _ashr = _int_op("shl"), _int_op("ashr")


def _make_horner(n: int):
    """Build an inlined Horner evaluation of an n-coefficient tuple (lowest degree first)."""
    expr = f"c[{n - 1}]"
    for i in range(n - 2, -1, -1):
        expr = f"({expr}) * z + c[{i}]"
    scope: dict = {}
    exec(f"def horner(z, c):\n    return {expr}\n", scope)
    return numba.njit(**_JIT)(scope["horner"])


# --------------------------------------------------------------------------- constants

# Polynomial coefficients: near-minimax Chebyshev fits computed with mpmath at 80 digits by
# benchmarks/vmath_coeffs.py (lowest degree first); the comment gives the fit's max error.

# exp(r) = 1 + r + r^2 * EXP(r), |r| <= ln2/2 (1.4e-18).
_EXP = (0.5, 0.1666666666666667, 0.04166666666666667, 0.008333333333326141,
        0.0013888888888883752, 0.00019841269874800493, 2.4801587325533363e-05,
        2.7557255425746435e-06, 2.7557273661348637e-07, 2.510520637395701e-08,
        2.0914679376583935e-09)
# log(1+f) = 2s + s*z*LOG(z), s = f/(2+f), z = s^2 <= ((sqrt2-1)/(sqrt2+1))^2 (3.1e-16 on a
# term that is scaled by z <= 0.03).
_LOG = (0.666666666666667, 0.39999999999899505, 0.28571428625975487, 0.2222221113479508,
        0.18182889125261723, 0.15331721600556042, 0.14616449685043406)
# sin(r) = r + r*z*SIN(z), cos(r) = 1 - z/2 + z^2*COS(z), z = r^2, |r| <= pi/4 (2e-17, 1e-18).
_SIN = (-0.16666666666666666, 0.008333333333330948, -0.00019841269836758574,
        2.755731610255244e-06, -2.5051131845003624e-08, 1.5918129294866608e-10)
_COS = (0.041666666666666664, -0.0013888888888887398, 2.480158729876569e-05,
        -2.7557317271729793e-07, 2.08761462684032e-09, -1.1382632425521717e-11)
# erf(x) = x * ERF_SMALL(x^2), |x| <= 1 (7e-18).
_ERF_SMALL = (1.1283791670955126, -0.37612638903183543, 0.11283791670945006,
              -0.02686617064323777, 0.0052239776071164225, -0.0008548325975389692,
              0.00012055294904839707, -1.492473690741966e-05, 1.6447424703317362e-06,
              -1.6208483801871705e-07, 1.3720064546777686e-08, -7.795898827002142e-10)
# erfc(x) = exp(-x^2) * G(t) on three pieces [a, b] of [1, 6], t = (x - mid) / half in
# [-1, 1]; fit errors times exp(-a^2) stay below 4e-17 (the ulp of erf near 1 is 1.1e-16).
_ERFC_A = (0.3215854164543175, -0.08181145886628141, 0.019037759963869534,
           -0.004116363162394126, 0.0008360838095598245, -0.00016081117392689626,
           2.9470857527439053e-05, -5.171326018931894e-06, 8.723041191564489e-07,
           -1.4191835155198762e-07, 2.2329284968957516e-08, -3.3974388960810998e-09,
           5.035188106062916e-10, -7.82387288116605e-11, 1.0959125834917356e-11)  # [1, 2]
_ERFC_B = (0.1936620962790687, -0.04742822817048103, 0.011114208555369912,
           -0.0025035488001132916, 0.0005440864558624406, -0.00011442715592553891,
           2.334754245726159e-05, -4.631695917758772e-06, 8.950235548552142e-07,
           -1.6876607146353643e-07, 3.108741481603338e-08, -5.5719576200679765e-09,
           9.837758249161545e-10, -1.9033868588167902e-10, 3.2196177708426666e-11)  # [2, 3.5]
_ERFC_C = (0.11630270721024731, -0.029379310747730134, 0.007283322451524611,
           -0.0017736306572842782, 0.0004246296483379977, -0.00010002375665980319,
           2.319761318822247e-05, -5.300318066570757e-06, 1.1938230253716045e-06,
           -2.653298776542253e-07, 5.8161804397739546e-08, -1.2425733213297197e-08,
           2.6574843694067957e-09, -6.688244982359302e-10, 1.3910367823589323e-10)  # [3.5, 6]

_H3, _H5, _H6, _H7 = (_make_horner(n) for n in (3, 5, 6, 7))
_H11, _H12, _H15 = (_make_horner(n) for n in (11, 12, 15))

_INF = math.inf
_NAN = math.nan
_SIGN = -(2**63)  # int64 with only the sign bit set
_LOG2E = 1.4426950408889634
# ln2 split in a 32-bit head (k * _LN2_HI is exact for |k| < 2^21) and the rounded rest.
_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_2_PI = 0.6366197723675814
# pi/2 as 33 + 33 + 53 bits: k * part is exact for the first two when |k| < 2^20.
_PIO2_1 = 1.57079632673412561417e00
_PIO2_2 = 6.07710050630396597660e-11
_PIO2_3 = 2.02226624879595063154e-21
_SQRT_HALF_BITS = 0x3FE6A09E667F3BCD  # bits of sqrt(1/2): mantissas are centred on 1
_MIN_NORMAL = 2.2250738585072014e-308
# exp(x) is inf above 709.78 and 0 below -745.13; clamping just outside keeps k in int range.
_EXP_HI = 709.8
_EXP_LO = -745.2

# --------------------------------------------------------------------------- float64 kernels


@numba.njit(**_JIT)
def _copysign(mag, sign):
    """Magnitude of mag with the sign bit of sign."""
    return _as_float((_as_int(mag) & ~_SIGN) | (_as_int(sign) & _SIGN))


@numba.njit(**_JIT)
def _exp_reduce(x):
    """Split x = k*ln2 + r with |r| <= ln2/2; returns (r, k) with k as int64."""
    kf = _rint(x * _LOG2E)
    k = np.int64(kf)
    # kf and float(k) are equal, but 'reassoc' cannot merge the two Cody-Waite products.
    r = (x - kf * _LN2_HI) - np.float64(k) * _LN2_LO  # kf * _LN2_HI is exact
    return r, k


@numba.njit(**_JIT)
def _exp_f64(x):
    """exp(x): Cody-Waite reduction, degree-12 polynomial, 2^k applied in two halves."""
    x = _EXP_HI if x > _EXP_HI else x  # written so that NaN passes through
    x = _EXP_LO if x < _EXP_LO else x
    r, k = _exp_reduce(x)
    p = 1.0 + (r + r * r * _H11(r, _EXP))
    # Two factors 2^(k//2) * 2^(k - k//2) stay normal for k in [-1076, 1024], so overflow,
    # underflow and subnormal results come out of the final rounding.
    k1 = k >> 1
    return p * _as_float((k1 + 1023) << 52) * _as_float((k - k1 + 1023) << 52)


@numba.njit(**_JIT)
def _expm1_f64(x):
    """expm1(x) = 2^k * (expm1(r) + 1) - 1, exact expm1(r) when k == 0."""
    x = _EXP_HI if x > _EXP_HI else x
    x = -60.0 if x < -60.0 else x  # expm1 is -1 in double below -37.5
    r, k = _exp_reduce(x)
    em1 = r + r * r * _H11(r, _EXP)
    big = k > 1023  # 2^1024 is not a double: scale by 2^1023 and double at the end
    s = _as_float(((k - 1 if big else k) + 1023) << 52)
    res = s * em1 + (s - 1.0)
    res = res * 2.0 if big else res
    res = em1 if k == 0 else res
    return x if x == 0.0 else res  # keeps -0.0 (r + r*r*p gives +0.0)


@numba.njit(**_JIT)
def _log_core(x, xm1):
    """log(x) for finite x > 0 (subnormals included), given xm1 ~ x - 1 exactly or less."""
    tiny = x < _MIN_NORMAL
    x = x * 18014398509481984.0 if tiny else x  # 2^54 makes subnormals normal
    bits = _as_int(x) - _SQRT_HALF_BITS
    e = (bits >> 52) - (54 if tiny else 0)
    m = _as_float((bits & 0x000FFFFFFFFFFFFF) + _SQRT_HALF_BITS)  # in [sqrt(1/2), sqrt(2))
    # For x in [sqrt(1/2), sqrt(2)) (e == 0) the exact xm1 replaces m - 1: this is how log1p
    # keeps full accuracy without a compensation term that 'reassoc' callers would fold.
    f = xm1 if e == 0 else m - 1.0
    s = _div(f, 2.0 + f)
    z = s * s
    hfsq = 0.5 * f * f
    # log(1+f) = f - (hfsq - s*(hfsq + z*LOG(z))): the small correction is kept apart from f.
    logm = f - (hfsq - s * (hfsq + z * _H7(z, _LOG)))
    ef = np.float64(e)
    return ef * _LN2_HI + (logm + ef * _LN2_LO)


@numba.njit(**_JIT)
def _log_f64(x):
    """log(x) with numpy's edge cases."""
    res = _log_core(x, x - 1.0)
    res = -_INF if x == 0.0 else res
    res = _NAN if x < 0.0 else res
    return res if x < _INF else x  # inf -> inf, nan -> nan


@numba.njit(**_JIT)
def _log1p_f64(x):
    """log1p(x) = log(1 + x), exact in the 1 + x in [sqrt(1/2), sqrt(2)) band."""
    u = 1.0 + x
    res = _log_core(u, x)
    res = x if u == 1.0 else res  # |x| < 2^-53: log1p(x) rounds to x, keeps -0.0
    res = res if x > -1.0 else (-_INF if x == -1.0 else _NAN)
    return res if x < _INF else x


@numba.njit(**_JIT)
def _trig_reduce(x):
    """Split x = k*pi/2 + r, |r| <= pi/4; returns (r, k) with k as int64."""
    kf = _rint(x * _2_PI)
    k = np.int64(kf)
    kf2 = np.float64(k)  # equals kf; keeps 'reassoc' from merging the three products
    y = x - kf * _PIO2_1  # exact: both products are exact and the operands are close
    r = (y - kf2 * _PIO2_2) - kf2 * _PIO2_3
    return (x if k == 0 else r), k  # x - 0.0 * c turns -0.0 into +0.0


@numba.njit(**_JIT)
def _sincos_poly(r):
    """(sin(r), cos(r)) for |r| <= pi/4."""
    z = r * r
    s = r + r * z * _H6(z, _SIN)
    s = r if r == 0.0 else s  # -0.0 + (+0.0) would lose the sign of sin(-0.0)
    c = (1.0 - 0.5 * z) + z * z * _H6(z, _COS)
    return s, c


@numba.njit(**_JIT)
def _sin_f64(x):
    """sin(x): quadrant q picks +-sin(r) or +-cos(r)."""
    r, q = _trig_reduce(x)
    s, c = _sincos_poly(r)
    res = c if q & 1 else s
    return _as_float(_as_int(res) ^ ((q & 2) << 62))


@numba.njit(**_JIT)
def _cos_f64(x):
    """cos(x) = sin(x + pi/2): the quadrant shifted by one."""
    r, q = _trig_reduce(x)
    s, c = _sincos_poly(r)
    q = q + 1
    res = c if q & 1 else s
    return _as_float(_as_int(res) ^ ((q & 2) << 62))


@numba.njit(**_JIT)
def _tan_f64(x):
    """tan(x) = sin(r)/cos(r), or -cos(r)/sin(r) in odd quadrants."""
    r, q = _trig_reduce(x)
    s, c = _sincos_poly(r)
    odd = (q & 1) == 1
    return _div(-c if odd else s, s if odd else c)


@numba.njit(**_JIT)
def _tanh_f64(x):
    """tanh(|x|) = -t / (t + 2) with t = expm1(-2|x|), sign restored."""
    a = abs(x)
    t = _expm1_f64(-2.0 * a)
    return _copysign(_div(-t, t + 2.0), x)


@numba.njit(**_JIT)
def _sigmoid_f64(x):
    """1 / (1 + exp(-x)), evaluated with exp(-|x|) <= 1 so nothing overflows."""
    e = _exp_f64(-abs(x))
    d = _div(1.0, 1.0 + e)
    return d if x >= 0.0 else e * d  # nan takes the second branch and stays nan


@numba.njit(**_JIT)
def _softplus_f64(x):
    """log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|))."""
    pos = x if x > 0.0 else 0.0
    return pos + _log1p_f64(_exp_f64(-abs(x)))


@numba.njit(**_JIT)
def _erf_f64(x):
    """erf(x): x*P(x^2) below 1, 1 - exp(-x^2)*G(x) on three pieces up to 6, then 1."""
    a = abs(x)
    small = x * _H12(x * x, _ERF_SMALL)
    b = 6.0 if a > 6.0 else a  # erf(6) rounds to 1; inf is clamped, nan passes
    b = 1.0 if b < 1.0 else b
    g_a = _H15((b - 1.5) * 2.0, _ERFC_A)
    g_b = _H15((b - 2.75) * 1.3333333333333333, _ERFC_B)
    g_c = _H15((b - 4.75) * 0.8, _ERFC_C)
    g = g_a if b < 2.0 else (g_b if b < 3.5 else g_c)
    large = _copysign(1.0 - _exp_f64(-b * b) * g, x)
    return small if a <= 1.0 else large


@numba.njit(**_JIT)
def _is_int(y):
    """Whether y is an integer (inf counts as one, as in C's pow)."""
    return _rint(y) == y


@numba.njit(**_JIT)
def _pow_f64(x, y):
    """x**y = +-exp(y*log|x|) with C99/numpy special cases."""
    ax = abs(x)
    res = _exp_f64(y * _log_f64(ax))
    y_int = _is_int(y)
    y_odd = y_int & (not _is_int(0.5 * y)) & (abs(y) < 9007199254740992.0)
    res = _copysign(res, x) if y_odd else res
    res = _NAN if (x < 0.0) & (x > -_INF) & (not y_int) else res
    res = 1.0 if (ax == 1.0) & (abs(y) == _INF) & (x == x) else res  # (+-1)**+-inf == 1
    return 1.0 if (y == 0.0) | (x == 1.0) else res  # x**0 == 1 and 1**y == 1, even for nan


# --------------------------------------------------------------------------- float32 kernels

# Native float32: every operation on float32 (np.float32 constants, int32 bit tricks through
# _iadd & co.), so a 256-bit vector holds 8 lanes.  Coefficients: the float32 fits of
# benchmarks/vmath_coeffs.py, rounded to float32; comments give the fit's max error.
_f = np.float32
# exp(r) = 1 + r + r^2 * EXP32(r), |r| <= ln2/2 (6.7e-8 on a term scaled by r^2 <= 0.12).
_EXP32 = tuple(map(_f, (0.5, 0.16666576266288757, 0.041666556149721146, 0.008363190107047558,
                        0.0013926198007538915)))
# log(1+f) as in _log_core with z <= 0.0295 (2.0e-7 on a term scaled by s*z < 0.006).
_LOG32 = tuple(map(_f, (0.6666668653488159, 0.39988550543785095, 0.29590317606925964)))
# sin/cos as _SIN/_COS on |r| <= 0.8 (2.5e-8, 2.5e-9): r overshoots pi/4 a little when
# x * 2/pi rounds in float32.
_SIN32 = tuple(map(_f, (-0.166666641831398, 0.00833270326256752, -0.0001957844360731542)))
_COS32 = tuple(map(_f, (0.0416666641831398, -0.0013888258254155517, 2.4538474463042803e-05)))
# tanh(x) = x + x*z*TANH32(z), z = x^2, |x| <= 0.625 (1.3e-8 on a term scaled by 0.24).
_TANH32 = tuple(map(_f, (-0.3333333432674408, 0.13333304226398468, -0.053959257900714874,
                         0.02176891826093197, -0.008343945257365704, 0.002292744815349579)))

_ZERO32, _HALF32, _ONE32, _TWO32 = _f(0.0), _f(0.5), _f(1.0), _f(2.0)
_INF32, _NAN32 = _f(math.inf), _f(math.nan)
_SIGN32 = np.int32(-(2**31))
_ZERO_I32 = np.int32(0)
_LOG2E32 = _f(1.4426950408889634)
# 16-bit head: e * _LN2_HI32 is exact for |e| < 2^8 (every float32 exponent).
_LN2_HI32 = _f(0.693145751953125)
_LN2_LO32 = _f(1.428606765330187e-06)
# exp(x) is inf above 88.73 and 0 below -103.98 in float32; _EXP_MAX32 is the largest
# float32 whose exp is finite.
_EXP_MAX32 = _f(88.72283172607422)
_EXP_HI32 = _f(88.8)
_EXP_LO32 = _f(-104.0)
_EXPM1_LO32 = _f(-30.0)  # expm1 is -1 in float32 below -17.4
_2_PI32 = _f(0.6366197723675814)
# pi/2 as three float32 parts (24 + 24 + 24 bits, residual 1e-23), applied with exact FMAs.
_PIO2_1_32 = _f(1.5707963705062866)
_PIO2_2_32 = _f(-4.371138828673793e-08)
_PIO2_3_32 = _f(-1.7151245100058819e-15)
_SQRT_HALF_BITS32 = np.int32(0x3F3504F3)
_MIN_NORMAL32 = _f(1.1754943508222875e-38)
_TWO25_32 = _f(33554432.0)
_TWO_M64_32 = _f(2.0**-64)
_TANH_HI32 = _f(9.5)  # tanh(x) rounds to +-1 above 9.01
_TANH_SMALL32 = _f(0.625)


@numba.njit(**_JIT)
def _copysign_f32(mag, sign):
    """Magnitude of mag with the sign bit of sign (float32)."""
    return _as_float(_ior(_iand(_as_int(mag), ~_SIGN32), _iand(_as_int(sign), _SIGN32)))


@numba.njit(**_JIT)
def _pow2_f32(k):
    """2^k as float32 for int32 k in [-126, 127]."""
    return _as_float(_shl(_iadd(k, 127), 23))


@numba.njit(**_JIT)
def _ldexp_f32(p, k):
    """p * 2^k for normal p and a normal result, by integer addition to the exponent."""
    return _as_float(_iadd(_as_int(p), _shl(k, 23)))


@numba.njit(**_JIT)
def _exp_reduce_f32(x):
    """Split x = k*ln2 + r with |r| <= ln2/2; returns (r, k) with k as int32."""
    kf = _rint(x * _LOG2E32)
    k = np.int32(kf)
    # Two SSA copies of k, as in _exp_reduce, so 'reassoc' keeps the products apart.
    r = (x - kf * _LN2_HI32) - np.float32(k) * _LN2_LO32
    return r, k


@numba.njit(**_JIT)
def _exp_f32(x):
    """exp(x) in float32: degree-6 polynomial, 2^k applied in two halves."""
    x = _EXP_HI32 if x > _EXP_HI32 else x  # NaN passes through
    x = _EXP_LO32 if x < _EXP_LO32 else x
    r, k = _exp_reduce_f32(x)
    # llvm.fma keeps 'reassoc' from rounding 1 + r before the small term is added.
    p = _ONE32 + _fma(r * r, _H5(r, _EXP32), r)
    # p * 2^k by adding k to p's exponent field: a product of two scale factors would be
    # regrouped by 'reassoc' into p * (2^64 * 2^64) = inf.  Subnormal results take one
    # float product by 2^-64, so they are rounded once.
    tiny = k < -125
    res = _ldexp_f32(p, _iadd(k, 64) if tiny else k)
    res = res * _TWO_M64_32 if tiny else res
    # k = 128 with p >= 1 overflows the exponent field; this also returns nan for nan.
    return res if x <= _EXP_MAX32 else x * _INF32


@numba.njit(**_JIT)
def _expm1_f32(x):
    """expm1(x) = 2^k * (expm1(r) + 1) - 1, exact expm1(r) when k == 0."""
    x = _EXP_HI32 if x > _EXP_HI32 else x
    x = _EXPM1_LO32 if x < _EXPM1_LO32 else x
    r, k = _exp_reduce_f32(x)
    em1 = r + r * r * _H5(r, _EXP32)
    big = k > 127  # 2^128 is not a float32: scale by 2^127 and double at the end
    s = _pow2_f32(_isub(k, 1) if big else k)
    res = s * em1 + (s - _ONE32)
    res = res * _TWO32 if big else res
    res = em1 if k == 0 else res
    return x if x == _ZERO32 else res


@numba.njit(**_JIT)
def _log_split_f32(x):
    """x = 2^e * m with m in [sqrt(1/2), sqrt(2)) for finite x > 0; returns (m, e: int32)."""
    tiny = x < _MIN_NORMAL32
    x = x * _TWO25_32 if tiny else x  # 2^25 makes subnormals normal
    bits = _isub(_as_int(x), _SQRT_HALF_BITS32)
    e = _isub(_ashr(bits, 23), 25 if tiny else 0)
    m = _as_float(_iadd(_iand(bits, 0x007FFFFF), _SQRT_HALF_BITS32))
    return m, e


@numba.njit(**_JIT)
def _log_poly_f32(f, e):
    """e*ln2 + log(1+f) for f in [sqrt(1/2)-1, sqrt(2)-1], e int32."""
    s = _div(f, _TWO32 + f)
    z = s * s
    hfsq = _HALF32 * f * f
    logm = f - _fma(-s, hfsq + z * _H3(z, _LOG32), hfsq)  # fma: f stays apart
    ef = np.float32(e)
    # llvm.fma: 'reassoc' would factor ef * _LN2_HI32 + ef * _LN2_LO32 into ef * fl(ln2).
    return _fma(ef, _LN2_HI32, _fma(ef, _LN2_LO32, logm))


@numba.njit(**_JIT)
def _log_f32(x):
    """log(x) in float32 with numpy's edge cases."""
    m, e = _log_split_f32(x)
    res = _log_poly_f32(m - _ONE32, e)
    res = -_INF32 if x == _ZERO32 else res
    res = _NAN32 if x < _ZERO32 else res
    return res if x < _INF32 else x


@numba.njit(**_JIT)
def _log1p_f32(x):
    """log1p(x): f = (1+x)*2^-e - 1 is formed from x itself, so u = 1+x rounds harmlessly."""
    u = _ONE32 + x
    m, e = _log_split_f32(u)
    # sc = 2^-e: x*sc is exact and sc - 1 too while e <= 24; above that 1 + x == x anyway.
    small = e < 25
    sc = _pow2_f32(_isub(_ZERO_I32, e if small else 25))
    f = _fma(x, sc, sc - _ONE32) if small else m - _ONE32
    res = _log_poly_f32(f, e)
    res = x if x == _ZERO32 else res  # keeps -0.0
    res = res if x > -_ONE32 else (-_INF32 if x == -_ONE32 else _NAN32)
    return res if x < _INF32 else x


@numba.njit(**_JIT)
def _trig_reduce_f32(x):
    """Split x = k*pi/2 + r, |r| <= 0.8; returns (r, k) with k as int32."""
    kf = _rint(x * _2_PI32)
    # The first FMA is exact (x and k*P1 are multiples of 2^-24 and close); the other two
    # round once each, far below the ulp of r for |x| < 2^18.
    r = _fma(-kf, _PIO2_1_32, x)
    r = _fma(-kf, _PIO2_2_32, r)
    r = _fma(-kf, _PIO2_3_32, r)
    return (x if kf == _ZERO32 else r), np.int32(kf)  # keeps sin(-0.0) == -0.0


@numba.njit(**_JIT)
def _sincos_poly_f32(r):
    """(sin(r), cos(r)) for |r| <= 0.8 in float32."""
    z = r * r
    s = r + r * z * _H3(z, _SIN32)
    s = r if r == _ZERO32 else s
    c = _fma(z * z, _H3(z, _COS32), _ONE32 - _HALF32 * z)
    return s, c


@numba.njit(**_JIT)
def _sin_f32(x):
    """sin(x) in float32: quadrant q picks +-sin(r) or +-cos(r)."""
    r, q = _trig_reduce_f32(x)
    s, c = _sincos_poly_f32(r)
    res = c if _iand(q, 1) else s
    return _as_float(_ixor(_as_int(res), _shl(_iand(q, 2), 30)))


@numba.njit(**_JIT)
def _cos_f32(x):
    """cos(x) = sin(x + pi/2) in float32."""
    r, q = _trig_reduce_f32(x)
    s, c = _sincos_poly_f32(r)
    q = _iadd(q, 1)
    res = c if _iand(q, 1) else s
    return _as_float(_ixor(_as_int(res), _shl(_iand(q, 2), 30)))


@numba.njit(**_JIT)
def _tanh_f32(x):
    """tanh(x): odd polynomial below 0.625, else +-(1 - 2/(exp(2|x|) + 1))."""
    a = abs(x)
    z = x * x
    small = x + x * z * _H6(z, _TANH32)
    small = x if x == _ZERO32 else small  # keeps -0.0
    # exp(2b) for b = min(|x|, 9.5): no overflow or underflow handling needed.
    b = _TANH_HI32 if a > _TANH_HI32 else a
    r, k = _exp_reduce_f32(b + b)
    e = _ldexp_f32(_ONE32 + _fma(r * r, _H5(r, _EXP32), r), k)
    large = _ONE32 - _div(_TWO32, e + _ONE32)
    return small if not (a >= _TANH_SMALL32) else _copysign_f32(large, x)  # nan: small


@numba.njit(**_JIT)
def _sigmoid_f32(x):
    """1 / (1 + exp(-x)) in float32, with exp(-|x|) <= 1."""
    e = _exp_f32(-abs(x))
    # One division (not e * (1/(1+e))): the error of e is damped by 1/(1+e).  nan: e is nan.
    return _div(_ONE32 if x >= _ZERO32 else e, _ONE32 + e)


# --------------------------------------------------------------------------- registry


def _float32(f64_func):
    """float32 version of a unary float64 kernel: widen, evaluate, round once."""

    def f32(x):
        return np.float32(f64_func(np.float64(x)))

    return numba.njit(**_JIT)(f32)


def _float32_binary(f64_func):
    """float32 version of a binary float64 kernel."""

    def f32(x, y):
        return np.float32(f64_func(np.float64(x), np.float64(y)))

    return numba.njit(**_JIT)(f32)


_F64 = {
    "exp": _exp_f64,
    "expm1": _expm1_f64,
    "log": _log_f64,
    "log1p": _log1p_f64,
    "sin": _sin_f64,
    "cos": _cos_f64,
    "tan": _tan_f64,
    "tanh": _tanh_f64,
    "sigmoid": _sigmoid_f64,
    "softplus": _softplus_f64,
    "erf": _erf_f64,
}

_F32 = {
    "exp": _exp_f32,
    "expm1": _expm1_f32,
    "log": _log_f32,
    "log1p": _log1p_f32,
    "sin": _sin_f32,
    "cos": _cos_f32,
    "tanh": _tanh_f32,
    "sigmoid": _sigmoid_f32,
}

VMATH: dict[tuple[str, str], object] = {
    **{(name, "float64"): f for name, f in _F64.items()},
    # tan, softplus, erf: the float64 kernel rounded once (a float32 tan(r) or sin/cos ratio
    # costs 2.5-3 ulp).
    **{(name, "float32"): _F32.get(name) or _float32(f) for name, f in _F64.items()},
    ("pow", "float64"): _pow_f64,
    ("pow", "float32"): _float32_binary(_pow_f64),
}
