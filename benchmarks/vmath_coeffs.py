"""Derive the polynomial coefficients and split constants of verglas/cpu_backend/vmath*.py
(needs mpmath)."""

import mpmath as mp
import numpy as np

mp.mp.dps = 80


def fit(f, a, b, degree: int) -> list[float]:
    """Near-minimax (Chebyshev) fit of f on [a, b]; coefficients lowest degree first."""
    coeffs, err = mp.chebyfit(f, [a, b], degree + 1, error=True)
    print(f"# max abs error {mp.nstr(err, 3)}")
    return [float(c) for c in reversed(coeffs)]


def _at0(f, value):
    return lambda v: value if v == 0 else f(v)


def rational_fit(f, a, b, m: int, n: int, nodes: int = 300):
    """P/Q with deg P = m, deg Q = n, Q(0) = 1, near-minimax on [a, b] by iteratively
    reweighted linearized least squares (Loeb); coefficients lowest degree first."""
    zs = [a + (b - a) * (1 - mp.cos(mp.pi * (k + 0.5) / nodes)) / 2 for k in range(nodes)]
    fs = [f(z) for z in zs]
    w = [mp.mpf(1)] * nodes
    for _ in range(8):
        rows = mp.matrix(nodes, m + 1 + n)
        rhs = mp.matrix(nodes, 1)
        for i, z in enumerate(zs):
            for j in range(m + 1):
                rows[i, j] = w[i] * z**j
            for j in range(1, n + 1):
                rows[i, m + j] = -w[i] * fs[i] * z**j
            rhs[i] = w[i] * fs[i]
        sol = mp.qr_solve(rows, rhs)[0]
        p = [sol[j] for j in range(m + 1)]
        q = [mp.mpf(1)] + [sol[m + j] for j in range(1, n + 1)]
        w = [1 / abs(mp.polyval(q[::-1], z)) for z in zs]
    err = max(abs(mp.polyval(p[::-1], z) / mp.polyval(q[::-1], z) - f(z))
              for z in [a + (b - a) * k / 2000 for k in range(2001)])
    print(f"# max abs error {mp.nstr(err, 3)}")
    return p, q


def split(v, bits: int, parts: int) -> list[float]:
    """v as parts-1 heads of `bits` significant bits and a double rest."""
    out = []
    for _ in range(parts - 1):
        m, e = mp.frexp(v)
        head = mp.ldexp(mp.floor(mp.ldexp(m, bits)), e - bits)
        out.append(float(head))
        v -= head
    return out + [float(v)]


def f32(values) -> list[float]:
    return [float(np.float32(v)) for v in values]


def main() -> None:
    """Print every coefficient table as Python literals."""
    half_ln2 = mp.log(2) / 2
    # exp(r) = 1 + r + r^2 * E(r) on |r| <= ln2/2.
    print("EXP =", fit(_at0(lambda r: (mp.exp(r) - 1 - r) / r**2, mp.mpf(1) / 2),
                       -half_ln2, half_ln2, 10))
    # log(1+f) = 2s + s*z*Q(z), s = f/(2+f), z = s^2, m = 1+f in [sqrt(1/2), sqrt(2)).
    zmax = ((mp.sqrt(2) - 1) / (mp.sqrt(2) + 1)) ** 2
    print("LOG =", fit(_at0(lambda z: (2 * mp.atanh(mp.sqrt(z)) / mp.sqrt(z) - 2) / z,
                            mp.mpf(2) / 3), 0, zmax, 6))
    # sin(r) = r + r*z*S(z), cos(r) = 1 - z/2 + z^2*C(z), z = r^2, |r| <= pi/4.
    z4 = (mp.pi / 4) ** 2
    print("SIN =", fit(_at0(lambda z: (mp.sin(mp.sqrt(z)) / mp.sqrt(z) - 1) / z,
                            -mp.mpf(1) / 6), 0, z4, 5))
    print("COS =", fit(_at0(lambda z: (mp.cos(mp.sqrt(z)) - 1 + z / 2) / z**2,
                            mp.mpf(1) / 24), 0, z4, 5))
    # erf(x) = x * P(x^2) for |x| <= 1.
    print("ERF_SMALL =", fit(_at0(lambda z: mp.erf(mp.sqrt(z)) / mp.sqrt(z),
                                  2 / mp.sqrt(mp.pi)), 0, 1, 11))
    # erfc(x) = exp(-x^2) * G(x) for 1 <= x <= 6, one fit per piece in t in [-1, 1].
    for a, b in ((1, 2), (2, 3.5), (3.5, 6)):
        mid, half = mp.mpf(a + b) / 2, mp.mpf(b - a) / 2

        def g(t, mid=mid, half=half):
            return mp.erfc(mid + half * t) * mp.exp((mid + half * t) ** 2)

        print(f"ERFC_{a}_{b} =", fit(g, -1, 1, 14))

    # float32 kernels (coefficients are then rounded to float32): ranges widened a little
    # for the float32 rounding of k.
    h32 = half_ln2 + mp.mpf("1e-4")
    print("EXP32 =", fit(_at0(lambda r: (mp.exp(r) - 1 - r) / r**2, mp.mpf(1) / 2),
                         -h32, h32, 4))
    print("LOG32 =", fit(_at0(lambda z: (2 * mp.atanh(mp.sqrt(z)) / mp.sqrt(z) - 2) / z,
                              mp.mpf(2) / 3), 0, zmax * mp.mpf("1.01"), 2))
    print("TANH32 =", fit(_at0(lambda z: (mp.tanh(mp.sqrt(z)) / mp.sqrt(z) - 1) / z,
                               -mp.mpf(1) / 3), 0, mp.mpf("0.625") ** 2, 5))

    # vmath_trig: sin(r) = r + r*z*SINPI(z) on |r| <= pi/2 (sin and cos reduce by pi).
    sin_z = _at0(lambda z: (mp.sin(mp.sqrt(z)) / mp.sqrt(z) - 1) / z, -mp.mpf(1) / 6)
    print("SINPI =", fit(sin_z, 0, (mp.pi / 2 + mp.mpf("1e-6")) ** 2, 7))
    print("SINPI32 =", f32(fit(sin_z, 0, (mp.pi / 2 + mp.mpf("0.01")) ** 2, 4)))
    # tan(r) = r + r*z*P(z)/Q(z) on |r| <= pi/4, as r*(1 + z*TANN(z)) / (1 + z*TAND(z)).
    tan_z = _at0(lambda z: (mp.tan(mp.sqrt(z)) / mp.sqrt(z) - 1) / z, mp.mpf(1) / 3)
    p, q = rational_fit(tan_z, 0, (mp.pi / 4 + mp.mpf("1e-6")) ** 2, 3, 3)
    print("TANN =", [float(p[j] + (q[j + 1] if j + 1 < len(q) else 0)) for j in range(len(p))])
    print("TAND =", [float(c) for c in q[1:]])
    print("TAN32 =", f32(fit(tan_z, 0, mp.mpf("0.8") ** 2, 6)))
    # pi in 31-bit heads and a double rest (float64); three float32 parts of pi and pi/2.
    print("PI =", split(mp.pi, 31, 4))
    p1 = mp.mpf(f32([mp.pi])[0])
    p2 = mp.mpf(f32([mp.pi - p1])[0])
    print("PI32 =", f32([p1, p2, mp.pi - p1 - p2]))
    h1 = mp.mpf(f32([mp.pi / 2])[0])
    h2 = mp.mpf(f32([mp.pi / 2 - h1])[0])
    print("PIO2_32 =", f32([h1, h2, mp.pi / 2 - h1 - h2]))

    # vmath_pow: log(m) = 2s + s^3 (2/3 + 2/5 z + z^2 LOGX(z)), exp(r) = 1 + r + r^2/2 +
    # r^3 EXPQ(r), both to ~2^-67 (the double-double pow).
    def logx(z):
        if z == 0:
            return mp.mpf(2) / 7
        s = mp.sqrt(z)
        v = (2 * mp.atanh(s) / s - 2) / z
        return (v - mp.mpf(2) / 3 - mp.mpf(2) / 5 * z) / z**2

    print("LOGX =", fit(logx, 0, zmax * mp.mpf("1.0001"), 6))
    with mp.workdps(200):  # exp(r) - 1 - r - r^2/2 cancels at small r
        def expq(r):
            if abs(r) < mp.mpf("1e-40"):
                return mp.mpf(1) / 6
            return (mp.exp(r) - 1 - r - r * r / 2) / r**3

        print("EXPQ =", fit(expq, -half_ln2 - mp.mpf("1e-6"), half_ln2 + mp.mpf("1e-6"), 9))

    # vmath float32 erf: x * (2/sqrt(pi) + z * ERF_SMALL32(z)) below 0.875, and
    # erfc(x) = t * exp(-x^2 + ERFC32(u)), t = 2/(2+x), u = (t - mid) / half on [0.875, 4].
    erf_x = _at0(lambda z: mp.erf(mp.sqrt(z)) / mp.sqrt(z), 2 / mp.sqrt(mp.pi))
    print("ERF_SMALL32 =", f32(fit(erf_x, 0, mp.mpf("0.875") ** 2, 5))[1:])  # (c0 split)
    c0 = 2 / mp.sqrt(mp.pi)
    print("2/sqrt(pi) float32 hi, lo =", f32([c0, c0 - mp.mpf(f32([c0])[0])]))
    t0, t1 = 2 / (2 + mp.mpf(4)), 2 / (2 + mp.mpf("0.875"))
    mid, half = (t0 + t1) / 2, (t1 - t0) / 2

    def log_erfc(u):
        t = mid + half * u
        x = 2 / t - 2
        return mp.log(mp.erfc(x) / t) + x * x

    print("ERFC32 =", f32(fit(log_erfc, -1, 1, 7)), "mid, 1/half =", f32([mid, 1 / half]))


if __name__ == "__main__":
    main()
