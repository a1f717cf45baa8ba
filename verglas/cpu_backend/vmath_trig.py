"""sin, cos and tan over the whole float range (see vmath's docstring for accuracy and speed).

Fast path (every lane): a Cody-Waite reduction by pi (sin, cos: one polynomial, the sign from
k) or pi/2 (tan: a rational n/d, swapped in odd quadrants) with pi in four parts of 31, 31,
31 and 53 bits, applied with llvm.fma.  For |k| < 2^21 each product k*part is exact; the
first step is exact, and so are the next two whenever the remainder is small (Sterbenz), so
r stays within 2^-52 relative next to a multiple of pi (elsewhere three roundings of r cost
up to ~1.5 ulp of r); the last part leaves ~2^-145 * k.  float32 sin/cos reduce by pi in
three float32 parts, float32 tan by pi/2 into a float32 pair rh + rl (two_prod, two_sum)
and corrects tan(rh) and the reciprocal to reach ~1 ulp.

Slow path (only vectors with a lane at or beyond _BIG / _BIG32, see vmath_vfabi): a
Payne-Hanek reduction in scalar integer code: x = M * 2^E (M < 2^53) times a 192-bit window
of 2/pi's bits that starts where the products stop being multiples of 4, kept modulo 4;
the fraction carries >= 120 significant bits however close x is to a multiple of pi/2
(the worst double is ~2^-61 away), and becomes r = f * pi/2 in double-double.  float32
lanes beyond _BIG32 go through the float64 functions and round once.
"""

import math

import numba
import numpy as np

from verglas.cpu_backend.vmath_ops import (JIT, as_float, as_int, fast_two_sum, fdiv, fma, iadd,
                                           iand, ixor, make_horner, rint, sadd, shl, ssub, to_int,
                                           two_prod, two_sum)
from verglas.cpu_backend.vmath_vfabi import rare_path

# Polynomial coefficients: benchmarks/vmath_coeffs.py (lowest degree first, fit error noted).
# sin(r) = r + r*z*SIN(z), cos(r) = 1 - z/2 + z^2*COS(z), z = r^2, |r| <= pi/4 (2e-17, 1e-18).
_SIN = (-0.16666666666666666, 0.008333333333330948, -0.00019841269836758574,
        2.755731610255244e-06, -2.5051131845003624e-08, 1.5918129294866608e-10)
_COS = (0.041666666666666664, -0.0013888888888887398, 2.480158729876569e-05,
        -2.7557317271729793e-07, 2.08761462684032e-09, -1.1382632425521717e-11)
# sin(r) = r + r*z*SINPI(z), |r| <= pi/2 (3.4e-19): one polynomial for sin and cos.
_SINPI = (-0.16666666666666666, 0.008333333333333316, -0.00019841269841254974,
          2.7557319219163205e-06, -2.505210761699229e-08, 1.605897731221174e-10,
          -7.643970288741763e-13, 2.7314446665270123e-15)
# tan(r) = r * (1 + z*TANN(z)) / (1 + z*TAND(z)), |r| <= pi/4 (8e-20 on the r*z term).
_TANN = (-0.13099052561120955, 0.0031179472669925906, -1.1151508665208521e-05,
         -1.786650710065306e-08)
_TAND = (-0.46432385894454287, 0.02455923358184024, -0.0002559688115940042)
_f = np.float32
# float32: sin(r) = r + r*z*SINPI32(z) on |r| <= pi/2 + 0.01 (1.2e-10); tan(r) =
# r + r*z*TAN32(z) on |r| <= 0.8 (1.2e-8), where r overshoots pi/4 a little when x * 2/pi
# rounds in float32.
_SINPI32 = tuple(map(_f, (-0.1666666716337204, 0.00833333283662796, -0.00019841079483740032,
                          2.7535934350453317e-06, -2.406801513643586e-08)))
_TAN32 = tuple(map(_f, (0.3333333432674408, 0.1333319991827011, 0.054001059383153915,
                        0.021570172160863876, 0.01013751421123743, 0.0009103539632633328,
                        0.004003292880952358)))

_H3, _H4, _H5, _H6, _H7, _H8 = (make_horner(n) for n in (3, 4, 5, 6, 7, 8))

_INV_PI = 0.3183098861837907
_2_PI = 0.6366197723675814
# pi in 31 + 31 + 31 + 53 bits: k * part is exact for the first three when k has at most 22
# significant bits (an integer below 2^21, or a half-integer below 2^20).
_PI_1 = 3.1415926534682512
_PI_2 = 1.215420100718692e-10
_PI_3 = 5.8254641096454e-20
_PI_4 = 2.5413117520279757e-29
_PIO2_HI = 1.5707963267948966  # pi/2 as a double-double
_PIO2_LO = 6.123233995736766e-17
# float64 lanes at or beyond _BIG take the slow path: below it |k| < 2^21 in pi/2 steps
# (tan) and a half-integer k < 2^20 in pi steps (cos).
_BIG = 2.0**21
_BIG32 = _f(2.0**17)  # float32: k = rint(x * fl(2/pi)) is off by < 0.01, so |r| < 0.8
_2_PI32 = _f(0.6366197723675814)
_INV_PI32 = _f(0.3183098861837907)
# pi as three float32 parts (24 bits each, residual 2e-23).
_PI_1_32 = _f(3.1415927410125732)
_PI_2_32 = _f(-8.742277657347586e-08)
_PI_3_32 = _f(-3.4302490200117637e-15)
# pi/2 as three float32 parts (24 + 24 + 24 bits, residual 1e-23), applied with FMAs.
_PIO2_1_32 = _f(1.5707963705062866)
_PIO2_2_32 = _f(-4.371138828673793e-08)
_PIO2_3_32 = _f(-1.7151245100058819e-15)
_ZERO32, _HALF32, _ONE32 = _f(0.0), _f(0.5), _f(1.0)
_COS_ONE32 = _f(2.0**-12)  # |x| up to which float32 cos(x) rounds to 1


# --------------------------------------------------------------------------- float64, fast


@numba.njit(**JIT)
def _reduce_pi(x, kf):
    """x - kf*pi for kf with at most 22 significant bits (see module doc)."""
    r = fma(-kf, _PI_1, x)
    r = fma(-kf, _PI_2, r)
    r = fma(-kf, _PI_3, r)
    return fma(-kf, _PI_4, r)


@numba.njit(**JIT)
def _reduce_pio2(x, kf):
    """x - kf*pi/2 for an integer kf, |kf| < 2^21 (the parts of pi, halved)."""
    r = fma(-kf, 0.5 * _PI_1, x)
    r = fma(-kf, 0.5 * _PI_2, r)
    r = fma(-kf, 0.5 * _PI_3, r)
    return fma(-kf, 0.5 * _PI_4, r)


@numba.njit(**JIT)
def _sin_poly(r, sign):
    """(-1)^sign * sin(r) for |r| <= pi/2 (sign: int64, only its low bit counts)."""
    z = r * r
    s = fma(r * z, _H8(z, _SINPI), r)
    s = r if r == 0.0 else s  # -0.0 + (+0.0) would lose the sign of sin(-0.0)
    return as_float(as_int(s) ^ (sign << 63))


@numba.njit(**JIT)
def _sin_core(x):
    """sin(x) = (-1)^k sin(x - k*pi) for |x| < _BIG."""
    kf = rint(x * _INV_PI)
    r = _reduce_pi(x, kf)
    return _sin_poly(x if kf == 0.0 else r, to_int(kf))  # x - 0*pi turns -0.0 into +0.0


@numba.njit(**JIT)
def _cos_core(x):
    """cos(x) = (-1)^(k+1) sin(x - (k+1/2)*pi) for |x| < _BIG."""
    kf = rint(x * _INV_PI - 0.5)
    return _sin_poly(_reduce_pi(x, kf + 0.5), to_int(kf) + 1)


@numba.njit(**JIT)
def _tan_core(x):
    """tan(x) = n/d, or -d/n in odd quadrants: tan(r) = n/d, r = x - k*pi/2."""
    kf = rint(x * _2_PI)
    r = x if kf == 0.0 else _reduce_pio2(x, kf)
    z = r * r
    n = fma(r * z, _H4(z, _TANN), r)
    n = r if r == 0.0 else n  # keeps tan(-0.0) == -0.0
    d = fma(z, _H3(z, _TAND), 1.0)
    odd = (to_int(kf) & 1) == 1
    return fdiv(-d if odd else n, n if odd else d)


# --------------------------------------------------------------------------- float64, slow


def _two_over_pi_words(nwords: int) -> np.ndarray:
    """One zero word, then 2/pi's bits: bit p (from the top of word 0) is 2/pi's bit p-63."""
    bits = 64 * (nwords - 1)
    scale = 1 << (bits + 128)  # 128 guard bits for the truncated series

    def atan_inv(n: int) -> int:  # atan(1/n) * scale, from its Taylor series
        total, power, k = 0, scale // n, 0
        while power:
            total += (-1) ** k * (power // (2 * k + 1))
            power //= n * n
            k += 1
        return total

    pi_scaled = 16 * atan_inv(5) - 4 * atan_inv(239)  # Machin's formula
    frac = ((2 * scale * scale) // pi_scaled) >> 128  # 2/pi * 2^bits
    words = [0] + [(frac >> (64 * (nwords - 1 - j))) & (2**64 - 1) for j in range(1, nwords)]
    return np.array(words, dtype=np.uint64)


# A float64 >= 2^21 is M * 2^E with E in [-31, 971]; its window starts at bit E + 62 and
# reads four words: 21 words cover it.
_TABLE = _two_over_pi_words(21)
# The slow path is exact integer and double-double code: fastmath=False explicitly, or numba
# would let it inherit the flags of the (fast-math) compile that first reaches it.
_STRICT = {"cache": False, "error_model": "numpy", "fastmath": False}
_U32 = np.uint64(0xFFFFFFFF)


@numba.njit(**_STRICT)
def _mul64(a, b):
    """(high, low) 64-bit words of the 128-bit product of uint64 a and b."""
    a0, a1, b0, b1 = a & _U32, a >> np.uint64(32), b & _U32, b >> np.uint64(32)
    p00, p01, p10, p11 = a0 * b0, a0 * b1, a1 * b0, a1 * b1
    mid = (p00 >> np.uint64(32)) + (p01 & _U32) + (p10 & _U32)
    low = (p00 & _U32) | (mid << np.uint64(32))
    high = p11 + (p01 >> np.uint64(32)) + (p10 >> np.uint64(32)) + (mid >> np.uint64(32))
    return high, low


@numba.njit(**_STRICT)
def _window(p):
    """64 bits of the 2/pi table starting at bit p."""
    w, sh = p >> 6, np.uint64(p & 63)
    return (_TABLE[w] << sh) | ((_TABLE[w + 1] >> (np.uint64(63) - sh)) >> np.uint64(1))


@numba.njit(**_STRICT)
def _rem_pio2(x):
    """(q, r_hi, r_lo): |x| = (q + f) * pi/2 with f in [-1/2, 1/2], r = f * pi/2 as a
    double-double, for finite |x| >= 2^21; q in [0, 3], sign of x applied."""
    bits = np.uint64(as_int(abs(x)))
    e = np.int64(bits >> np.uint64(52)) - 1075
    m = (bits & np.uint64(0xFFFFFFFFFFFFF)) | np.uint64(1 << 52)
    p = e + 62
    a, b, c = _window(p), _window(p + 64), _window(p + 128)
    hc, lc = _mul64(m, c)
    hb, lb = _mul64(m, b)
    _, la = _mul64(m, a)
    r1 = hc + lb
    r2 = hb + la + np.uint64(r1 < hc)  # (m*V) mod 2^192 = r2:r1:lc; x*2/pi = that * 2^-190
    q = np.int64(r2 >> np.uint64(62))
    g2 = (r2 << np.uint64(2)) | (r1 >> np.uint64(62))  # the fraction f = g / 2^192
    g1 = (r1 << np.uint64(2)) | (lc >> np.uint64(62))
    g0 = lc << np.uint64(2)
    neg = (g2 >> np.uint64(63)) == 1
    if neg:  # f >= 1/2: f - 1 = -(2^192 - g) / 2^192, one more quadrant
        q += 1
        g0 = ~g0 + np.uint64(1)
        carry = np.uint64(g0 == 0)
        g1 = ~g1 + carry
        g2 = ~g2 + np.uint64((carry == 1) & (g1 == 0))
    # f as a double-double: 32-bit chunks are exact doubles, summed without loss.
    hi, lo, scale = 0.0, 0.0, 2.0**-32
    for g in (g2, g1, g0):
        for part in (g >> np.uint64(32), g & _U32):
            t = np.float64(part) * scale
            s = hi + t
            bb = s - hi
            lo += (hi - (s - bb)) + (t - bb)
            hi = s
            scale *= 2.0**-32
    fh = hi + lo
    fl = lo - (fh - hi)
    rh = fh * _PIO2_HI
    rl = fma(fh, _PIO2_HI, -rh) + (fh * _PIO2_LO + fl * _PIO2_HI)
    r_hi = rh + rl
    r_lo = rl - (r_hi - rh)
    if neg:
        r_hi, r_lo = -r_hi, -r_lo
    if x < 0.0:
        return (-q) & 3, -r_hi, -r_lo
    return q & 3, r_hi, r_lo


@numba.njit(**_STRICT)
def _sincos_dd(rh, rl):
    """(sin(rh + rl), cos(rh + rl)) for |rh| <= pi/4, |rl| <= ulp(rh)."""
    z = rh * rh
    s = rh + (rh * z * _H6(z, _SIN) + rl * (1.0 - 0.5 * z))
    c = ((1.0 - 0.5 * z) + z * z * _H6(z, _COS)) - rl * rh
    return s, c


@numba.njit(**_STRICT)
def _trig_big(x, which):
    """sin (which 0), cos (1) or tan (2) of finite |x| >= 2^21, nan for +-inf."""
    if not abs(x) < math.inf:
        return x - x
    q, rh, rl = _rem_pio2(x)
    if which == 2:  # tan(rh + rl) = t + rl * (1 + t^2), or -cot likewise
        z = rh * rh
        n, d = rh + rh * z * _H4(z, _TANN), 1.0 + z * _H3(z, _TAND)
        t = -d / n if q & 1 else n / d
        return t + rl * (1.0 + t * t)
    s, c = _sincos_dd(rh, rl)
    q += which
    v = c if q & 1 else s
    return -v if q & 2 else v


def _sin_big(x):
    return _trig_big(x, np.int64(0))  # (not a literal: one compiled _trig_big for all)


def _cos_big(x):
    return _trig_big(x, np.int64(1))  # (not a literal: one compiled _trig_big for all)


def _tan_big(x):
    return _trig_big(x, np.int64(2))  # (not a literal: one compiled _trig_big for all)


_fix_sin = rare_path("sin_f64", _sin_big, "float64", _BIG)
_fix_cos = rare_path("cos_f64", _cos_big, "float64", _BIG)
_fix_tan = rare_path("tan_f64", _tan_big, "float64", _BIG)


@numba.njit(**JIT)
def sin_f64(x):
    """sin(x): the fast path, or Payne-Hanek for vectors with a lane >= 2^21."""
    return _fix_sin(x, _sin_core(x))


@numba.njit(**JIT)
def cos_f64(x):
    """cos(x): the fast path, or Payne-Hanek for vectors with a lane >= 2^21."""
    return _fix_cos(x, _cos_core(x))


@numba.njit(**JIT)
def tan_f64(x):
    """tan(x): the fast path, or Payne-Hanek for vectors with a lane >= 2^21."""
    return _fix_tan(x, _tan_core(x))


# --------------------------------------------------------------------------- float32


@numba.njit(**JIT)
def _reduce_pi_f32(x, kf):
    """x - kf*pi in float32 for |kf| < 2^16 (integer or half-integer)."""
    r = fma(-kf, _PI_1_32, x)  # exact: x and kf*P1 are multiples of 2^-23 and close
    r = fma(-kf, _PI_2_32, r)
    return fma(-kf, _PI_3_32, r)


@numba.njit(**JIT)
def _sin_poly_f32(r, sign):
    """(-1)^sign * sin(r) in float32 for |r| <= pi/2 + 0.01 (sign: int32, low bit)."""
    z = r * r
    rz = fma(r, z, r * fma(r, r, -z))  # r^3 rounded once: sin(r) ~ r - r^3/6 near pi/2
    s = fma(rz, _H5(z, _SINPI32), r)
    s = r if r == _ZERO32 else s
    return as_float(ixor(as_int(s), shl(sign, 31)))


@numba.njit(**JIT)
def _sin_core_f32(x):
    """sin(x) = (-1)^k sin(x - k*pi) in float32 for |x| < 2^17."""
    kf = rint(x * _INV_PI32)
    r = _reduce_pi_f32(x, kf)
    return _sin_poly_f32(x if kf == _ZERO32 else r, to_int(kf))


@numba.njit(**JIT)
def _cos_core_f32(x):
    """cos(x) = (-1)^(k+1) sin(x - (k+1/2)*pi) in float32 for |x| < 2^17; 1 for |x| <=
    2^-12, where cos(x) rounds to 1 (sin's polynomial near pi/2 sums r ~ -1.57 and a term
    ~ 0.57 in float32, and gave 1 - 2^-24 for cos(0): seed 28921)."""
    kf = rint(x * _INV_PI32 - _HALF32)
    c = _sin_poly_f32(_reduce_pi_f32(x, kf + _HALF32), iadd(to_int(kf), 1))
    return _ONE32 if abs(x) <= _COS_ONE32 else c


@numba.njit(**JIT)
def _tan_core_f32(x):
    """tan(x) in float32: tan(r), or -1/tan(r) in odd quadrants, with r = rh + rl."""
    kf = rint(x * _2_PI32)
    r1 = fma(-kf, _PIO2_1_32, x)  # exact
    ph, pl = two_prod(kf, _PIO2_2_32)
    rh, e = two_sum(r1, -ph)
    # r = x - k*pi/2 = rh + rl to ~2^-34 relative, normalized so that |rl| <= ulp(rh)/2
    rh, rl = fast_two_sum(rh, ssub(e, fma(kf, _PIO2_3_32, pl)))
    rh = x if kf == _ZERO32 else rh
    rl = _ZERO32 if kf == _ZERO32 else rl
    z = rh * rh
    rz = rh * z
    p = _H7(z, _TAN32)
    t = fma(rz, p, rh)
    # tan(rh + rl) = t + tl with tl = t's rounding error (rh - t is exact) + rl * (1 + t^2);
    # -1/(t + tl) to ~0.5 ulp with e2, the division's residual.
    tl = sadd(fma(rz, p, ssub(rh, t)), rl * fma(t, t, _ONE32))
    y = fdiv(-_ONE32, t)
    e2 = fma(y, t, _ONE32)
    even = x if x == _ZERO32 else sadd(t, tl)  # tl is +0.0 for x = -0.0
    return fma(y, e2 + y * tl, y) if iand(to_int(kf), 1) else even


@numba.njit(**_STRICT)
def _wide(x, which):
    """sin/cos/tan of a float32 beyond _BIG32 in float64, rounded once."""
    x64 = np.float64(x)
    if abs(x64) >= _BIG:
        return np.float32(_trig_big(x64, which))
    if which == 0:
        return np.float32(_sin_core(x64))
    return np.float32(_cos_core(x64) if which == 1 else _tan_core(x64))


def _sin_big32(x):
    return _wide(x, np.int64(0))


def _cos_big32(x):
    return _wide(x, np.int64(1))


def _tan_big32(x):
    return _wide(x, np.int64(2))


_fix_sin32 = rare_path("sin_f32", _sin_big32, "float32", float(_BIG32))
_fix_cos32 = rare_path("cos_f32", _cos_big32, "float32", float(_BIG32))
_fix_tan32 = rare_path("tan_f32", _tan_big32, "float32", float(_BIG32))


@numba.njit(**JIT)
def sin_f32(x):
    """sin(x) in float32: the fast path, or float64 for vectors with a lane >= 2^17."""
    return _fix_sin32(x, _sin_core_f32(x))


@numba.njit(**JIT)
def cos_f32(x):
    """cos(x) in float32: the fast path, or float64 for vectors with a lane >= 2^17."""
    return _fix_cos32(x, _cos_core_f32(x))


@numba.njit(**JIT)
def tan_f32(x):
    """tan(x) in float32: the fast path, or float64 for vectors with a lane >= 2^17."""
    return _fix_tan32(x, _tan_core_f32(x))
