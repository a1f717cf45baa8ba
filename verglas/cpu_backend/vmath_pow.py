"""x**y for float64 in double-double, and the C99/numpy special cases of pow.

pow_f64 computes exp(y * log|x|) with log|x| as a double-double (relative error < 2^-67),
y * log|x| as an exact product plus the low part, and exp of that double-double, so the
value before the final rounding is within ~2^-58 of the exact one for every finite
result: <= 0.52 ulp for normal results (1 ulp for subnormal ones, rounded twice), and an
exactly representable x**y (3.0**2, 2.0**-1074, (-3.0)**3) comes out exact.  The steps
whose exactness matters use vmath_ops' strict operations and fma, and so does every add or
subtract that takes one of their error terms: LLVM's fast-math combines of a 'reassoc'/'nsz'
add look through its operands' own adds, strict or not, and would cancel an error term
symbolically (a + b - (a + b) = 0).
"""

import numba
import numpy as np

from verglas.cpu_backend.vmath_ops import (JIT, as_float, as_int, fast_two_sum, fdiv, fma,
                                           make_horner, rint, sadd, smul, ssub, to_int, two_prod,
                                           two_sum)

# Coefficients: benchmarks/vmath_coeffs.py (lowest degree first, fit error noted).
# log(m) = 2s + s^3 * (2/3 + 2/5 z + z^2 * LOGX(z)), s = (m-1)/(m+1), z = s^2 <= 0.0295
# (2.5e-16 on a term scaled by s^3 z^2 <= 4.4e-6).
_LOGX = (0.285714285714286, 0.22222222222140664, 0.1818181822608058, 0.15384606389061298,
         0.13334202049145272, 0.11721811990546963, 0.11566360418810438)
# exp(r) = 1 + r + r^2/2 + r^3 * EXPQ(r), |r| <= ln2/2 (8e-18 on a term scaled by r^3).
_EXPQ = (0.16666666666666669, 0.041666666666666664, 0.008333333333330065,
         0.0013888888888886554, 0.00019841269863040922, 2.4801587317135435e-05,
         2.7557268479724004e-06, 2.7557282983637385e-07, 2.510037611136142e-08,
         2.0911229928855294e-09)
_H7, _H10 = make_horner(7), make_horner(10)

_INF = np.inf
_NAN = np.nan
_SIGN = -(2**63)
_TWO_THIRDS = (0.6666666666666666, 3.700743415417188e-17)  # double-doubles
_TWO_FIFTHS = (0.4, -2.2204460492503132e-17)
_LOG2E = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01  # 32 bits: k * _LN2_HI is exact for |k| < 2^21
_LN2_LO = 1.9082149292705877e-10
_SQRT_HALF_BITS = 0x3FE6A09E667F3BCD
_MIN_NORMAL = 2.2250738585072014e-308
_EXP_HI = 709.8  # exp overflows above 709.79 and is 0 below -745.14
_EXP_LO = -745.2
_2_53 = 9007199254740992.0


@numba.njit(**JIT)
def _log_dd(a):
    """log(a) as a double-double for finite a > 0 (subnormals included)."""
    tiny = a < _MIN_NORMAL
    a = a * 18014398509481984.0 if tiny else a  # 2^54 makes subnormals normal
    bits = as_int(a) - _SQRT_HALF_BITS
    e = np.float64((bits >> 52) - (54 if tiny else 0))
    m = as_float((bits & 0x000FFFFFFFFFFFFF) + _SQRT_HALF_BITS)  # in [sqrt(1/2), sqrt(2))
    f = m - 1.0  # exact
    d, dl = fast_two_sum(2.0, f)  # 1 + m
    inv = fdiv(1.0, d)  # one division: s = f/d to within an ulp, then its residual
    sh = f * inv
    sl = ssub(fma(-sh, d, f), smul(sh, dl)) * inv  # f - sh*d is exact
    zh, zl = two_prod(sh, sh)
    zl = zl + 2.0 * sh * sl
    # v = 2/3 + 2/5 z + z^2 X(z) in double-double (the 2/5 z term is ~1% of v)
    ah, al = two_prod(_TWO_FIFTHS[0], zh)
    al = al + (_TWO_FIFTHS[0] * zl + _TWO_FIFTHS[1] * zh)
    vh, vl = fast_two_sum(_TWO_THIRDS[0], ah)
    vl = sadd(vl, al + _TWO_THIRDS[1] + zh * zh * _H7(zh, _LOGX))
    ph, pl = two_prod(sh, zh)  # s^3
    pl = pl + (sh * zl + sl * zh)
    th, tl = two_prod(ph, vh)  # s^3 v, ~1% of 2s
    tl = tl + (ph * vl + pl * vh)
    uh, ul = fast_two_sum(2.0 * sh, th)
    ul = sadd(ul, 2.0 * sl + tl)
    lh, ll = fast_two_sum(e * _LN2_HI, uh)  # exact: |e*ln2| > |uh| unless e == 0
    return fast_two_sum(lh, sadd(ll, sadd(ul, e * _LN2_LO)))


@numba.njit(**JIT)
def _exp_dd(th, tl):
    """exp(th + tl), |tl| <= ulp(th): one rounding of a value within ~2^-59 of the exact."""
    inside = (th <= _EXP_HI) & (th >= _EXP_LO)
    tl = tl if inside else 0.0  # (also the nan of inf - inf)
    th = _EXP_HI if th > _EXP_HI else th  # nan passes through
    th = _EXP_LO if th < _EXP_LO else th
    kf = rint(th * _LOG2E)
    k = to_int(kf)
    # r = th - k*ln2 + tl as a normalized double-double (th - k*_LN2_HI is exact)
    rh, rl = two_sum(fma(-kf, _LN2_HI, th), tl - kf * _LN2_LO)
    qh, ql = two_prod(rh, rh)  # r^2 / 2, exactly
    sh, sl = fast_two_sum(rh, 0.5 * qh)
    sl = sadd(sl, 0.5 * ql + rh * qh * _H10(rh, _EXPQ))
    eh, el = fast_two_sum(1.0, sh)
    p = sadd(eh, sadd(sadd(el, sl), smul(sadd(eh, sl), rl)))  # exp(rh) * (1 + rl)
    k1 = k >> 1  # 2^k in two normal factors: over/underflow come from the last rounding
    return smul(smul(p, as_float((k1 + 1023) << 52)), as_float((k - k1 + 1023) << 52))


@numba.njit(**JIT)
def is_int(y):
    """Whether y is an integer (inf counts as one, as in C's pow)."""
    return rint(y) == y


@numba.njit(**JIT)
def pow_special(x, y, res):
    """res = exp(y*log|x|) (float64) with numpy's sign and special cases of pow applied."""
    y_int = is_int(y)
    y_odd = y_int & (not is_int(0.5 * y)) & (abs(y) < _2_53)
    res = as_float(as_int(res) | (as_int(x) & _SIGN)) if y_odd else res  # sign of x
    res = _NAN if (x < 0.0) & (x > -_INF) & (not y_int) else res
    res = 1.0 if (abs(x) == 1.0) & (abs(y) == _INF) else res  # (+-1)**+-inf
    return 1.0 if (y == 0.0) | (x == 1.0) else res  # x**0 and 1**y are 1, even for nan


@numba.njit(**JIT)
def pow_f64(x, y):
    """x**y in float64, <= 0.52 ulp for normal results, exact when representable."""
    a = abs(x)
    lh, ll = _log_dd(a)
    lh = lh if (a > 0.0) & (a < _INF) else (-_INF if a == 0.0 else a)
    ll = ll if (a > 0.0) & (a < _INF) else 0.0
    th, tl = two_prod(y, lh)
    return pow_special(x, y, _exp_dd(th, tl + y * ll))
