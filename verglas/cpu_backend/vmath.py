"""Vectorizable scalar math for numba loops: no libm calls, no branches, only selects.

LLVM's loop vectorizer cannot widen a loop that calls ``math.exp`` & co. (this llvmlite has
no SVML), so each function here is plain arithmetic, comparisons turned into selects and
int/float bitcasts.  ``for i in range(n): out[i] = VMATH[("exp", "float64")](x[i])`` compiles
to packed AVX2/AVX-512 code.  Every float32 kernel is native (float32 arithmetic, int32 bit
tricks: 16 lanes per zmm register) except pow, which evaluates exp(y*log|x|) in float64 and
rounds once.  This module holds exp, expm1, log, log1p, tanh, sigmoid, softplus, erf and the
registry; vmath_trig sin/cos/tan (with a Payne-Hanek slow path that vmath_vfabi makes cost
only the vectors that need it), vmath_pow the double-double float64 pow, vmath_ops the
building blocks.

Accuracy, max error in ulp of the exactly rounded result over each function's whole float
range (tests/cpu_backend/test_vmath_domain.py: ~1e6 inputs per function and dtype, random
bit patterns over every exponent, subnormals, thresholds, nan/inf/+-0; numpy in long double
as reference, scipy.special.erf in float64 for erf, itself ~1 ulp off), the same with the
kernels in {"contract"} loops and in {"nsz", "arcp", "contract", "reassoc"} loops::

    dtype     exp  expm1   log  log1p   sin   cos   tan  tanh  sigm  softp   erf   pow
    float32  1.02   1.59  0.85   1.42  1.58  1.58  0.94  1.25  2.33   1.57  1.32  0.50
    float64  1.00   1.80  1.14   2.50  2.32  2.09  3.29  2.48  2.16   2.88  3.00  1.00

float64 exp and pow reach 1 ulp only on subnormal results (rounded twice); normal pow
results are within 0.52 ulp, and an exactly representable x**y is exact (3.0**2 == 9.0,
2.0**-1074, (-3.0)**3).  nan, inf and zero results match numpy exactly, signed zeros too
(sin/tan/tanh/expm1/log1p/erf(-0.0), (-0.0)**3) except in callers compiled with 'nsz'.

Speed, benchmarks/vmath_bench.py on this machine (AMD EPYC Zen 4, 2 cores, AVX-512,
numba 0.68.1): ms per call on 1e6 contiguous elements in [-10, 10] (log [1e-3, 1e3], log1p
[-0.9, 100], pow x in [0.1, 10], y in [-5, 5]), minimum of rounds interleaved with the
previous version of these kernels (``--against``), the machine shared and noisy.  ``math``
is the same numba loop calling ``math.*`` (pow: ``v ** w``, what generated code used for
pow until now); numpy has no erf/sigmoid/softplus ufunc, so scipy.special (erf, expit) and
``np.logaddexp(x, 0)`` stand in::

    function dtype   vmath  before  numpy  math.*  (ms / 1e6)
    exp      f32      0.30    0.30   0.45    2.3
    exp      f64      0.93    0.92   0.95    6.3
    expm1    f32      0.34    0.34   0.44   11.8
    expm1    f64      1.01    1.00   1.21   10.6
    log      f32      0.37    0.37   0.37    2.6
    log      f64      1.06    1.07   0.76    3.5
    log1p    f32      0.57    0.57   0.57   13.3
    log1p    f64      1.23    1.22   1.01    9.4
    sin      f32      0.33    0.35   0.74    8.5
    sin      f64      0.70    0.91  17.7    16.8
    cos      f32      0.29    0.33   0.52    8.3
    cos      f64      0.68    0.89  17.9    17.3
    tan      f32      0.59    1.07   0.39   13.6
    tan      f64      0.81    1.01   1.34   17.8
    tanh     f32      0.42    0.42   0.35   14.8
    tanh     f64      1.25    1.25   1.65   14.9
    sigmoid  f32      0.38    0.38   3.26    3.0
    sigmoid  f64      0.97    1.01   5.48    4.7
    softplus f32      1.05    3.06  16.0    13.6
    softplus f64      2.67    2.67  14.6    10.0
    erf      f32      0.75    3.24  20.6    17.0
    erf      f64      3.14    3.15  18.4    15.2
    pow      f32      2.87    2.86   0.68    4.5
    pow      f64      4.95    3.08   3.05   15.8

pow f64 costs 1.6x the old single-double version (337 ulp near overflow, 3.0**2 != 9.0, so
generated code did not use it); it is 2-3x faster than the libm pow loop it replaces.

Domains: every function is defined over the whole float range.  sin/cos/tan take a
Cody-Waite fast path below 2^21 (float64) / 2^17 (float32); a vector holding a larger lane
calls the scalar Payne-Hanek slow path for its lanes (~40 ns per element: an array of only
huge arguments runs ~40 ms per 1e6, numpy's sin 61 ms, its tan 7.5 ms).

Generated code calls the kernels as functions compiled with ``FASTMATH = {"contract"}``
(kernels.scalar_impl; LLVM inlines the call into the vectorized loop); the building blocks
are ``inline="always"`` into them, and the tests inline the kernels themselves into loops
with the backend's flags, where they must stay accurate.  Never add 'nnan' or 'ninf' (the
NaN/inf handling relies on IEEE compares).  What a 'reassoc'/'arcp' caller would break
stays out of its reach: rounding is ``llvm.rint`` (not the 1.5*2^52 shifter trick), error-free
steps use vmath_ops' strict add/sub/mul (flagged 'afn' only, which numba leaves alone) and its
fma (made on one-lane vectors: numba stamps its flags on every call returning a scalar float,
and 'reassoc' lets LLVM fold fma(a, b, -a*b) to 0), division is a bare fdiv (numba's '/' adds
a ZeroDivisionError branch that blocks vectorization, and 'arcp' would round twice).
"""

import math

import numba
import numpy as np

from verglas.cpu_backend.vmath_ops import (FASTMATH, JIT, as_float, as_int, ashr, fdiv, fma, iadd,
                                           iand, ior, isub, make_horner, rint, sadd, shl, smul,
                                           to_int)
from verglas.cpu_backend.vmath_pow import pow_f64, pow_special
from verglas.cpu_backend.vmath_trig import cos_f32, cos_f64, sin_f32, sin_f64, tan_f32, tan_f64

__all__ = ["FASTMATH", "VMATH"]

# rowfusion imports the bit casts under these names (vmath_ops has them now).
_as_float, _as_int = as_float, as_int

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

_H3, _H5, _H6, _H7, _H8 = (make_horner(n) for n in (3, 5, 6, 7, 8))
_H11, _H12, _H15 = (make_horner(n) for n in (11, 12, 15))

_INF = math.inf
_NAN = math.nan
_SIGN = -(2**63)  # int64 with only the sign bit set
_LOG2E = 1.4426950408889634
# ln2 split in a 32-bit head (k * _LN2_HI is exact for |k| < 2^21) and the rounded rest.
_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_SQRT_HALF_BITS = 0x3FE6A09E667F3BCD  # bits of sqrt(1/2): mantissas are centred on 1
_MIN_NORMAL = 2.2250738585072014e-308
# exp(x) is inf above 709.78 and 0 below -745.13; clamping just outside keeps k in int range.
_EXP_HI = 709.8
_EXP_LO = -745.2

# --------------------------------------------------------------------------- float64 kernels


@numba.njit(**JIT)
def _copysign(mag, sign):
    """Magnitude of mag with the sign bit of sign."""
    return as_float((as_int(mag) & ~_SIGN) | (as_int(sign) & _SIGN))


@numba.njit(**JIT)
def _exp_reduce(x):
    """Split x = k*ln2 + r with |r| <= ln2/2; returns (r, k) with k as int64."""
    kf = rint(x * _LOG2E)
    k = to_int(kf)
    # kf and float(k) are equal, but 'reassoc' cannot merge the two Cody-Waite products.
    r = (x - kf * _LN2_HI) - np.float64(k) * _LN2_LO  # kf * _LN2_HI is exact
    return r, k


@numba.njit(**JIT)
def _exp_f64(x):
    """exp(x): Cody-Waite reduction, degree-12 polynomial, 2^k applied in two halves."""
    x = _EXP_HI if x > _EXP_HI else x  # written so that NaN passes through
    x = _EXP_LO if x < _EXP_LO else x
    r, k = _exp_reduce(x)
    p = sadd(1.0, r + r * r * _H11(r, _EXP))  # strict: 'reassoc' would round 1 + r first
    # Two factors 2^(k//2) * 2^(k - k//2) stay normal for k in [-1076, 1024], so overflow,
    # underflow and subnormal results come out of the final rounding.
    k1 = k >> 1
    # strict products: 'reassoc' would multiply the two factors first (2^1024 = inf)
    return smul(smul(p, as_float((k1 + 1023) << 52)), as_float((k - k1 + 1023) << 52))


@numba.njit(**JIT)
def _expm1_f64(x):
    """expm1(x) = 2^k * (expm1(r) + 1) - 1, exact expm1(r) when k == 0."""
    x = _EXP_HI if x > _EXP_HI else x
    x = -60.0 if x < -60.0 else x  # expm1 is -1 in double below -37.5
    r, k = _exp_reduce(x)
    em1 = r + r * r * _H11(r, _EXP)
    big = k > 1023  # 2^1024 is not a double: scale by 2^1023 and double at the end
    s = as_float(((k - 1 if big else k) + 1023) << 52)
    res = s * em1 + (s - 1.0)
    res = res * 2.0 if big else res
    res = em1 if k == 0 else res
    return x if x == 0.0 else res  # keeps -0.0 (r + r*r*p gives +0.0)


@numba.njit(**JIT)
def _log_core(x, xm1):
    """log(x) for finite x > 0 (subnormals included), given xm1 ~ x - 1 exactly or less."""
    tiny = x < _MIN_NORMAL
    x = x * 18014398509481984.0 if tiny else x  # 2^54 makes subnormals normal
    bits = as_int(x) - _SQRT_HALF_BITS
    e = (bits >> 52) - (54 if tiny else 0)
    m = as_float((bits & 0x000FFFFFFFFFFFFF) + _SQRT_HALF_BITS)  # in [sqrt(1/2), sqrt(2))
    # For x in [sqrt(1/2), sqrt(2)) (e == 0) the exact xm1 replaces m - 1: this is how log1p
    # keeps full accuracy without a compensation term that 'reassoc' callers would fold.
    f = xm1 if e == 0 else m - 1.0
    s = fdiv(f, 2.0 + f)
    z = s * s
    hfsq = 0.5 * f * f
    # log(1+f) = f - (hfsq - s*(hfsq + z*LOG(z))): the small correction is kept apart from f.
    logm = f - fma(-s, hfsq + z * _H7(z, _LOG), hfsq)  # fma: f stays apart
    ef = np.float64(e)
    # llvm.fma: 'reassoc' would factor ef * _LN2_HI + ef * _LN2_LO into ef * fl(ln2)
    return fma(ef, _LN2_HI, fma(ef, _LN2_LO, logm))


@numba.njit(**JIT)
def _log_f64(x):
    """log(x) with numpy's edge cases."""
    res = _log_core(x, x - 1.0)
    res = -_INF if x == 0.0 else res
    res = _NAN if x < 0.0 else res
    return res if x < _INF else x  # inf -> inf, nan -> nan


@numba.njit(**JIT)
def _log1p_f64(x):
    """log1p(x) = log(1 + x), exact in the 1 + x in [sqrt(1/2), sqrt(2)) band."""
    u = 1.0 + x
    res = _log_core(u, x)
    res = x if u == 1.0 else res  # |x| < 2^-53: log1p(x) rounds to x, keeps -0.0
    res = res if x > -1.0 else (-_INF if x == -1.0 else _NAN)
    return res if x < _INF else x


@numba.njit(**JIT)
def _tanh_f64(x):
    """tanh(|x|) = -t / (t + 2) with t = expm1(-2|x|), sign restored."""
    a = abs(x)
    t = _expm1_f64(-2.0 * a)
    return _copysign(fdiv(-t, t + 2.0), x)


@numba.njit(**JIT)
def _sigmoid_f64(x):
    """1 / (1 + exp(-x)), evaluated with exp(-|x|) <= 1 so nothing overflows."""
    e = _exp_f64(-abs(x))
    # One division (not e * (1/(1+e))): the error of e is damped by 1/(1+e).  nan: e is nan.
    return fdiv(1.0 if x >= 0.0 else e, 1.0 + e)


@numba.njit(**JIT)
def _softplus_f64(x):
    """log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|))."""
    pos = x if x > 0.0 else 0.0
    return pos + _log1p_f64(_exp_f64(-abs(x)))


@numba.njit(**JIT)
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


@numba.njit(**JIT)
def _pow_f32(x, y):
    """x**y for float32 through float64: the error of exp(y*log|x|) in float64, at most
    ~104 * 2^-52 relative, leaves float32's rounding exact for representable results."""
    x64, y64 = np.float64(x), np.float64(y)
    return np.float32(pow_special(x64, y64, _exp_f64(y64 * _log_f64(abs(x64)))))


# --------------------------------------------------------------------------- float32 kernels

# Native float32: every operation on float32 (np.float32 constants, int32 bit tricks through
# iadd & co.), so a 256-bit vector holds 8 lanes.  Coefficients: the float32 fits of
# benchmarks/vmath_coeffs.py, rounded to float32; comments give the fit's max error.
_f = np.float32
# exp(r) = 1 + r + r^2 * EXP32(r), |r| <= ln2/2 (6.7e-8 on a term scaled by r^2 <= 0.12).
_EXP32 = tuple(map(_f, (0.5, 0.16666576266288757, 0.041666556149721146, 0.008363190107047558,
                        0.0013926198007538915)))
# log(1+f) as in _log_core with z <= 0.0295 (2.0e-7 on a term scaled by s*z < 0.006).
_LOG32 = tuple(map(_f, (0.6666668653488159, 0.39988550543785095, 0.29590317606925964)))
# tanh(x) = x + x*z*TANH32(z), z = x^2, |x| <= 0.625 (1.3e-8 on a term scaled by 0.24).
_TANH32 = tuple(map(_f, (-0.3333333432674408, 0.13333304226398468, -0.053959257900714874,
                         0.02176891826093197, -0.008343945257365704, 0.002292744815349579)))

# erf(x) = x * (2/sqrt(pi) + z * ERF_SMALL32(z)), z = x^2 <= 0.875^2 (8.9e-9)
_ERF_SMALL32 = tuple(map(_f, (-0.3761255443096161, 0.11282496899366379, -0.026792947202920914,
                              0.005034370813518763, -0.0006214585155248642)))
_2_SQRTPI32 = (_f(1.128379225730896), _f(-5.8635382771399236e-08))  # float32 hi + lo
_ERFC32 = tuple(map(_f, (-0.652258574962616, 0.2446625530719757, 0.005673416890203953,
                         -0.0022813770920038223, -0.00014774675946682692,
                         5.6671233323868364e-05, 2.898467073464417e-06,
                         -1.802264364414441e-06)))

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
_SQRT_HALF_BITS32 = np.int32(0x3F3504F3)
_MIN_NORMAL32 = _f(1.1754943508222875e-38)
_TWO25_32 = _f(33554432.0)
_TWO_M64_32 = _f(2.0**-64)
_TANH_HI32 = _f(9.5)  # tanh(x) rounds to +-1 above 9.01
_TANH_SMALL32 = _f(0.625)
_ERF_SMALL32_MAX = _f(0.875)
_ERF_HI32 = _f(4.0)  # erf(x) rounds to 1 in float32 from 3.92 on
# erfc(x) = t * exp(-x^2 + ERFC32(u)), t = 2/(2+x), u = (t - _ERFC_T32) * _ERFC_S32 in [-1, 1]
# for x in [0.875, 4] (5e-10).
_ERFC_T32 = _f(0.5144927501678467)
_ERFC_S32 = _f(5.519999980926514)


@numba.njit(**JIT)
def _copysign_f32(mag, sign):
    """Magnitude of mag with the sign bit of sign (float32)."""
    return as_float(ior(iand(as_int(mag), ~_SIGN32), iand(as_int(sign), _SIGN32)))


@numba.njit(**JIT)
def _pow2_f32(k):
    """2^k as float32 for int32 k in [-126, 127]."""
    return as_float(shl(iadd(k, 127), 23))


@numba.njit(**JIT)
def _ldexp_f32(p, k):
    """p * 2^k for normal p and a normal result, by integer addition to the exponent."""
    return as_float(iadd(as_int(p), shl(k, 23)))


@numba.njit(**JIT)
def _exp_reduce_f32(x):
    """Split x = k*ln2 + r with |r| <= ln2/2; returns (r, k) with k as int32."""
    kf = rint(x * _LOG2E32)
    r = fma(-kf, _LN2_LO32, fma(-kf, _LN2_HI32, x))  # the inner fma is exact
    return r, to_int(kf)


@numba.njit(**JIT)
def _exp_f32(x):
    """exp(x) in float32: degree-6 polynomial, 2^k applied in two halves."""
    x = _EXP_HI32 if x > _EXP_HI32 else x  # NaN passes through
    x = _EXP_LO32 if x < _EXP_LO32 else x
    r, k = _exp_reduce_f32(x)
    # llvm.fma keeps 'reassoc' from rounding 1 + r before the small term is added.
    p = _ONE32 + fma(r * r, _H5(r, _EXP32), r)
    # p * 2^k by adding k to p's exponent field: a product of two scale factors would be
    # regrouped by 'reassoc' into p * (2^64 * 2^64) = inf.  Subnormal results take one
    # float product by 2^-64, so they are rounded once.
    tiny = k < -125
    res = _ldexp_f32(p, iadd(k, 64) if tiny else k)
    res = res * _TWO_M64_32 if tiny else res
    # k = 128 with p >= 1 overflows the exponent field; this also returns nan for nan.
    return res if x <= _EXP_MAX32 else x * _INF32


@numba.njit(**JIT)
def _expm1_f32(x):
    """expm1(x) = 2^k * (expm1(r) + 1) - 1, exact expm1(r) when k == 0."""
    x = _EXP_HI32 if x > _EXP_HI32 else x
    x = _EXPM1_LO32 if x < _EXPM1_LO32 else x
    r, k = _exp_reduce_f32(x)
    em1 = r + r * r * _H5(r, _EXP32)
    big = k > 127  # 2^128 is not a float32: scale by 2^127 and double at the end
    s = _pow2_f32(isub(k, 1) if big else k)
    res = s * em1 + (s - _ONE32)
    res = res * _TWO32 if big else res
    res = em1 if k == 0 else res
    return x if x == _ZERO32 else res


@numba.njit(**JIT)
def _log_split_f32(x):
    """x = 2^e * m with m in [sqrt(1/2), sqrt(2)) for finite x > 0; returns (m, e: int32)."""
    tiny = x < _MIN_NORMAL32
    x = x * _TWO25_32 if tiny else x  # 2^25 makes subnormals normal
    bits = isub(as_int(x), _SQRT_HALF_BITS32)
    e = isub(ashr(bits, 23), 25 if tiny else 0)
    m = as_float(iadd(iand(bits, 0x007FFFFF), _SQRT_HALF_BITS32))
    return m, e


@numba.njit(**JIT)
def _log_poly_f32(f, e):
    """e*ln2 + log(1+f) for f in [sqrt(1/2)-1, sqrt(2)-1], e int32."""
    s = fdiv(f, _TWO32 + f)
    z = s * s
    hfsq = _HALF32 * f * f
    logm = f - fma(-s, hfsq + z * _H3(z, _LOG32), hfsq)  # fma: f stays apart
    ef = np.float32(e)
    # llvm.fma: 'reassoc' would factor ef * _LN2_HI32 + ef * _LN2_LO32 into ef * fl(ln2).
    return fma(ef, _LN2_HI32, fma(ef, _LN2_LO32, logm))


@numba.njit(**JIT)
def _log_f32(x):
    """log(x) in float32 with numpy's edge cases."""
    m, e = _log_split_f32(x)
    res = _log_poly_f32(m - _ONE32, e)
    res = -_INF32 if x == _ZERO32 else res
    res = _NAN32 if x < _ZERO32 else res
    return res if x < _INF32 else x


@numba.njit(**JIT)
def _log1p_f32(x):
    """log1p(x): f = (1+x)*2^-e - 1 is formed from x itself, so u = 1+x rounds harmlessly."""
    u = _ONE32 + x
    m, e = _log_split_f32(u)
    # sc = 2^-e: x*sc is exact and sc - 1 too while e <= 24; above that 1 + x == x anyway.
    small = e < 25
    sc = _pow2_f32(isub(_ZERO_I32, e if small else 25))
    f = fma(x, sc, sc - _ONE32) if small else m - _ONE32
    res = _log_poly_f32(f, e)
    res = x if x == _ZERO32 else res  # keeps -0.0
    res = res if x > -_ONE32 else (-_INF32 if x == -_ONE32 else _NAN32)
    return res if x < _INF32 else x


@numba.njit(**JIT)
def _tanh_f32(x):
    """tanh(x): odd polynomial below 0.625, else +-(1 - 2/(exp(2|x|) + 1))."""
    a = abs(x)
    z = x * x
    small = x + x * z * _H6(z, _TANH32)
    small = x if x == _ZERO32 else small  # keeps -0.0
    # exp(2b) for b = min(|x|, 9.5): no overflow or underflow handling needed.
    b = _TANH_HI32 if a > _TANH_HI32 else a
    r, k = _exp_reduce_f32(b + b)
    e = _ldexp_f32(_ONE32 + fma(r * r, _H5(r, _EXP32), r), k)
    large = _ONE32 - fdiv(_TWO32, e + _ONE32)
    return small if not (a >= _TANH_SMALL32) else _copysign_f32(large, x)  # nan: small


@numba.njit(**JIT)
def _sigmoid_f32(x):
    """1 / (1 + exp(-x)) in float32, with exp(-|x|) <= 1."""
    e = _exp_f32(-abs(x))
    # One division (not e * (1/(1+e))): the error of e is damped by 1/(1+e).  nan: e is nan.
    return fdiv(_ONE32 if x >= _ZERO32 else e, _ONE32 + e)



@numba.njit(**JIT)
def _softplus_f32(x):
    """log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|)) in float32."""
    pos = x if x > _ZERO32 else _ZERO32
    return pos + _log1p_f32(_exp_f32(-abs(x)))


@numba.njit(**JIT)
def _erf_f32(x):
    """erf(x) in float32: x*P(x^2) below 0.875, else 1 - t*exp(-x^2 + Q(t))."""
    a = abs(x)
    z = x * x
    # x * 2/sqrt(pi) exact inside the fma: only the small terms round before the sum
    small = fma(x, _2_SQRTPI32[0], x * (_2_SQRTPI32[1] + z * _H5(z, _ERF_SMALL32)))
    small = x if x == _ZERO32 else small  # keeps erf(-0.0) == -0.0
    b = _ERF_HI32 if a > _ERF_HI32 else a  # inf is clamped, nan passes
    b = _ERF_SMALL32_MAX if b < _ERF_SMALL32_MAX else b
    t = fdiv(_TWO32, _TWO32 + b)
    q = _H8((t - _ERFC_T32) * _ERFC_S32, _ERFC32)
    b2 = b * b
    arg = (q - fma(b, b, -b2)) - b2  # -b^2 exactly (fma), then the larger term
    r, k = _exp_reduce_f32(arg)  # arg in [-17, -0.7]: no range handling
    e = _ldexp_f32(_ONE32 + fma(r * r, _H5(r, _EXP32), r), k)
    large = _copysign_f32(_ONE32 - t * e, x)
    return small if not (a >= _ERF_SMALL32_MAX) else large  # nan: small


# --------------------------------------------------------------------------- registry


_F64 = {
    "exp": _exp_f64,
    "expm1": _expm1_f64,
    "log": _log_f64,
    "log1p": _log1p_f64,
    "sin": sin_f64,
    "cos": cos_f64,
    "tan": tan_f64,
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
    "sin": sin_f32,
    "cos": cos_f32,
    "tan": tan_f32,
    "tanh": _tanh_f32,
    "sigmoid": _sigmoid_f32,
    "softplus": _softplus_f32,
    "erf": _erf_f32,
}

VMATH: dict[tuple[str, str], object] = {
    **{(name, "float64"): f for name, f in _F64.items()},
    **{(name, "float32"): f for name, f in _F32.items()},
    ("pow", "float64"): pow_f64,
    ("pow", "float32"): _pow_f32,
}
