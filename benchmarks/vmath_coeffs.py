"""Derive the polynomial coefficients of verglas/cpu_backend/vmath.py (needs mpmath)."""

import mpmath as mp

mp.mp.dps = 80


def fit(f, a, b, degree: int) -> list[float]:
    """Near-minimax (Chebyshev) fit of f on [a, b]; coefficients lowest degree first."""
    coeffs, err = mp.chebyfit(f, [a, b], degree + 1, error=True)
    print(f"# max abs error {mp.nstr(err, 3)}")
    return [float(c) for c in reversed(coeffs)]


def _at0(f, value):
    return lambda v: value if v == 0 else f(v)


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
    z08 = mp.mpf("0.8") ** 2
    print("SIN32 =", fit(_at0(lambda z: (mp.sin(mp.sqrt(z)) / mp.sqrt(z) - 1) / z,
                              -mp.mpf(1) / 6), 0, z08, 2))
    print("COS32 =", fit(_at0(lambda z: (mp.cos(mp.sqrt(z)) - 1 + z / 2) / z**2,
                              mp.mpf(1) / 24), 0, z08, 2))
    print("TANH32 =", fit(_at0(lambda z: (mp.tanh(mp.sqrt(z)) / mp.sqrt(z) - 1) / z,
                               -mp.mpf(1) / 3), 0, mp.mpf("0.625") ** 2, 5))


if __name__ == "__main__":
    main()
