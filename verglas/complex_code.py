"""The complex helpers of generated scalar code (scalar_code.HELPERS takes them in): numpy's
definitions where numba's cmath or Python's differ (orders, extremes, sign, exp, log, sqrt,
the trigonometric functions' inf and NaN cases, expm1, log1p, pow, division). Each is the
source of one function, written into the generated module that calls it.
"""

from __future__ import annotations

__all__ = ["COMPLEX_HELPERS"]

COMPLEX_HELPERS = {
    "complex_lt": '''def complex_lt(a, b):
    """numpy's a < b for complex numbers: by real part, then imaginary part; NaN is false."""
    if a.real < b.real:
        return a.imag == a.imag and b.imag == b.imag
    return a.real == b.real and a.imag < b.imag
''',
    "complex_le": '''def complex_le(a, b):
    """numpy's a <= b for complex numbers (see complex_lt)."""
    if a.real < b.real:
        return a.imag == a.imag and b.imag == b.imag
    return a.real == b.real and a.imag <= b.imag
''',
    "complex_maximum": '''def complex_maximum(a, b):
    """numpy's maximum of complex numbers: a NaN first operand wins, then a >= b keeps a."""
    if a != a or complex_le(b, a):
        return a
    return b
''',
    "complex_minimum": '''def complex_minimum(a, b):
    """numpy's minimum of complex numbers (see complex_maximum)."""
    if a != a or complex_le(a, b):
        return a
    return b
''',
    "complex_clip": '''def complex_clip(x, lo, hi):
    """numpy's clip of complex numbers: a NaN wins (x first, then lo, then hi), and unlike
    maximum and minimum a tie gives the bound (clip(-0+0j, 0j, 1) is 0j, not -0+0j)."""
    if x != x:
        return x
    m = x if complex_lt(lo, x) else lo
    if m != m:
        return m
    return m if complex_lt(m, hi) else hi
''',
    "complex_sign": '''def complex_sign(z):
    """numpy's sign of a complex number: z / |z|, 0 for 0, and for an infinite part the sign
    of that part (NaN when both are infinite)."""
    re_inf, im_inf = math.isinf(z.real), math.isinf(z.imag)
    if re_inf and im_inf:
        return complex(math.nan, math.nan)
    if re_inf:
        return complex(1.0 if z.real > 0 else -1.0, 0.0)
    if im_inf:
        return complex(0.0, 1.0 if z.imag > 0 else -1.0)
    if z.real == 0 and z.imag == 0:
        return complex(0.0, 0.0)
    a = abs(z)
    return complex(z.real / a, z.imag / a)
''',
    "complex_exp": '''def complex_exp(z):
    """numpy's complex exp (C99's cexp): a zero imaginary part stays exact (exp(1000 + 0j) is
    inf + 0j, not inf + nan*j), exp(-inf + i*y) is 0 for any y, an infinite real part keeps
    inf + nan*j, and exp(x) beyond the largest double scales in two halves, so a finite part
    of the result stays finite (exp(710 + 1j) has a finite real part)."""
    z = np.complex128(z)
    x, y = z.real, z.imag
    if y == 0:
        return complex(math.exp(x), y)
    if not math.isfinite(y):
        if x == -math.inf:
            return complex(0.0, 0.0)
        if x == math.inf:
            return complex(x, y - y)
        return complex(math.nan, math.nan)
    c, s = math.cos(y), math.sin(y)
    if x > 709.0:  # (strict: reassociated, exp(h) * exp(h) folds into exp(2h) = inf)
        half = math.exp(0.5 * x)
        return complex(strict_mul(half * c, half), strict_mul(half * s, half))
    e = math.exp(x)
    return complex(e * c, e * s)
''',
    "complex_log": '''def complex_log(z):
    """numpy's complex log: log|z| from log1p near the unit circle, where log(hypot) loses
    the low digits of a small result (|z| = 1 + 6.5e-6: 4e-12 relative off); halved parts
    where |z| overflows. (numba-cuda's cmath.log gave log|z| = inf for |z| > 1e154.)"""
    a, b = abs(np.float64(z.real)), abs(np.float64(z.imag))
    angle = math.atan2(np.float64(z.imag), np.float64(z.real))
    h = math.hypot(a, b)
    if 0.71 <= h <= 1.73:  # (NaN and inf parts: below)
        return complex(0.5 * math.log1p(sum_squares_minus_one(a, b)), angle)
    if h == math.inf and a != math.inf and b != math.inf:
        return complex(math.log(math.hypot(0.5 * a, 0.5 * b)) + 0.6931471805599453, angle)
    return complex(math.log(h), angle)
''',
    "complex_sqrt": '''def complex_sqrt(z):
    """numpy's complex square root (C99 csqrt): the signed zeros of the branch cut, inf and
    NaN parts as C99 says, and parts scaled where hypot would overflow or lose a subnormal's
    digits (numba's cmath.sqrt raised ZeroDivisionError for 5e-324j, fuzzer seed 16983)."""
    a, b = np.float64(z.real), np.float64(z.imag)
    if a == 0.0 and b == 0.0:
        return complex(0.0, b)
    if math.isinf(b):
        return complex(math.inf, b)
    if a != a:
        return complex(a, math.nan)
    if math.isinf(a):
        if a > 0.0:
            return complex(a, math.copysign(b - b, b))
        return complex(abs(b - b), math.copysign(a, b))
    scale = 1.0
    if abs(a) >= 7.446288774449766e+307 or abs(b) >= 7.446288774449766e+307:
        a, b, scale = a * 0.25, b * 0.25, 2.0
    elif abs(a) < 4.450147717014403e-308 and abs(b) < 4.450147717014403e-308:
        a, b, scale = a * 18014398509481984.0, b * 18014398509481984.0, 7.450580596923828e-09
    if a >= 0.0:
        t = math.sqrt((a + math.hypot(a, b)) * 0.5)
        return complex(scale * t, scale * (b / (2.0 * t)))
    t = math.sqrt((-a + math.hypot(a, b)) * 0.5)
    return complex(scale * (abs(b) / (2.0 * t)), scale * math.copysign(t, b))
''',
    "complex_cos": '''def complex_cos(z):
    """cos(z) as numpy's (C99 Annex G, glibc's ccos: ccosh(-b + ia)): cmath's for a finite z;
    a part that is inf or NaN follows the standard's cases, where numba's cmath gave
    NaN + NaN j (cos(nan + 0j) is nan + 0j; seed 34483). complex_sin, complex_tan and
    complex_tanh likewise."""
    a, b = z.real, z.imag
    if math.isfinite(a) and math.isfinite(b):
        return cmath.cos(z)
    x, y = -b, a
    if math.isfinite(x):
        return complex(y - y, 0.0 if x == 0 else math.nan)
    if math.isinf(x):
        if math.isfinite(y) and y != 0:
            return complex(math.copysign(math.inf, math.cos(y)),
                           math.copysign(math.inf, math.sin(y)) * math.copysign(1.0, x))
        if y == 0:
            return complex(math.inf, y * math.copysign(1.0, x))
        return complex(math.inf, y - y)
    return complex(math.nan, y if y == 0 else math.nan)
''',
    "complex_sin": '''def complex_sin(z):
    """sin(z) as numpy's (C99 Annex G, glibc's csin): cmath's for a finite z; a part that is
    inf or NaN follows the standard's cases, where numba's cmath gave NaN + NaN j."""
    a, b = z.real, z.imag
    if math.isfinite(a) and math.isfinite(b):
        return cmath.sin(z)
    negative = math.copysign(1.0, a) < 0
    ra = abs(a)
    if math.isfinite(b):
        if b == 0:
            return complex(ra - ra, b)
        return complex(math.nan, math.nan)
    if math.isinf(b):
        if ra == 0:
            return complex(-0.0 if negative else 0.0, b)
        if math.isfinite(ra):
            re = math.copysign(math.inf, math.sin(ra))
            im = math.copysign(math.inf, math.cos(ra))
            return complex(-re if negative else re, -im if b < 0 else im)
        return complex(ra - ra, math.inf)
    return complex((-0.0 if negative else 0.0) if ra == 0 else math.nan, math.nan)
''',
    "complex_tanh": '''def complex_tanh(z):
    """tanh(z) as numpy's (glibc's ctanh cases for an inf or NaN part; cmath's otherwise)."""
    a, b = z.real, z.imag
    if math.isfinite(a) and math.isfinite(b):
        return cmath.tanh(z)
    if math.isinf(a):
        if math.isfinite(b) and abs(b) > 1:
            return complex(math.copysign(1.0, a),
                           math.copysign(0.0, math.sin(b) * math.cos(b)))
        return complex(math.copysign(1.0, a), math.copysign(0.0, b))
    if b == 0:
        return complex(a, b)
    return complex(a if a == 0 else math.nan, math.nan)
''',
    "complex_tan": '''def complex_tan(z):
    """tan(z) as numpy's: cmath's for a finite z, else -i tanh(iz) (complex_tanh's cases
    give glibc's ctan ones)."""
    if math.isfinite(z.real) and math.isfinite(z.imag):
        return cmath.tan(z)
    w = complex_tanh(complex(-z.imag, z.real))
    return complex(w.imag, -w.real)
''',
    "complex_expm1": '''def complex_expm1(z):
    """numpy's complex expm1: expm1(x) cos(y) - 2 sin(y/2)^2 + i exp(x) sin(y), so a small z
    keeps its digits (exp(z) - 1 lost them: 1e-10 came out 1e-7 relative off)."""
    x, y = np.float64(z.real), np.float64(z.imag)
    a = math.sin(0.5 * y)
    return complex(math.expm1(x) * math.cos(y) - 2.0 * a * a, math.exp(x) * math.sin(y))
''',
    "complex_expm1_single": '''def complex_expm1_single(z):
    """complex_expm1 of a complex64 as numpy computes it, in float32: exp(x) overflows to inf
    above ~88.7 (in float64, then rounded, a product with a small sine stayed finite)."""
    x, y = np.float32(z.real), np.float32(z.imag)
    a = np.float32(math.sin(np.float64(y) * 0.5))
    re = np.float32(math.expm1(x)) * np.float32(math.cos(y)) - np.float32(2.0) * a * a
    im = np.float32(math.exp(x)) * np.float32(math.sin(y))
    return complex(re, im)
''',
    "complex_log1p": '''def complex_log1p(z):
    """numpy's log1p of a complex number: log|1 + z| by hypot (inf where |1 + z| overflows),
    the angle by atan2. libdevice's hypot(DBL_MAX, 1.9) is inf on a real GPU, one ulp high:
    such a hypot is taken again of the halved parts."""
    re = np.float64(z.real) + 1.0
    im = np.float64(z.imag)
    h = math.hypot(re, im)
    if h == math.inf and abs(re) != math.inf and abs(im) != math.inf:
        half = math.hypot(0.5 * re, 0.5 * im)
        if half <= 8.988465674311582e307:  # (DBL_MAX / 2 and two ulps: |1 + z| is finite)
            return complex(math.log(half) + 0.6931471805599453, math.atan2(im, re))
    return complex(math.log(h), math.atan2(im, re))
''',
    "complex_log1p_single": '''def complex_log1p_single(z):
    """complex_log1p of a complex64 as numpy computes it, in float32: 1 + z.real rounds first
    and |1 + z| is a float32 before its log (in float64, log1p(3.7e-7 + 0j) came out
    3.70e-07 where numpy gives 3.58e-07: fuzz seed 35023)."""
    re = np.float32(np.float32(z.real) + np.float32(1.0))
    im = np.float32(z.imag)
    h = np.float32(math.hypot(re, im))
    return complex(np.float32(math.log(h)), np.float32(math.atan2(im, re)))
''',
    "complex_pow": '''def complex_pow(x, y):
    """numpy's complex power: 1 for a zero exponent, 0 or NaN for a zero base, products for
    an integer exponent below 100, else exp(y * log(x)) as C's cpow. (numba-cuda's lost the
    real part of i**i-like powers on a real GPU.)"""
    a = np.complex128(x)
    b = np.complex128(y)
    if b.real == 0.0 and b.imag == 0.0:
        return complex(1.0, 0.0)
    if a.real == 0.0 and a.imag == 0.0:
        if b.real > 0.0:
            return complex(0.0, 0.0)
        return complex(math.nan, math.nan)
    if b.imag == 0.0 and abs(b.real) < 100.0 and b.real == math.floor(b.real):
        n = int(b.real)
        if n == 1:
            return a
        if n == 2:
            return a * a
        if n == 3:
            return a * a * a
        m = abs(n)
        result = complex(1.0, 0.0)
        base = a
        while m > 0:
            if m & 1:
                result = result * base
            base = base * base
            m >>= 1
        if n < 0:
            return complex_divide(complex(1.0, 0.0), result)
        return result
    return complex_exp(b * complex_log(a))
''',
    "sum_squares_minus_one": '''def sum_squares_minus_one(a, b):
    """a*a + b*b - 1 for a, b < 2 to nearly full precision: the squares as exact two-term
    products (Veltkamp split), summed with the -1 by error-free additions."""
    c = 134217729.0 * a  # 2**27 + 1
    ah = c - (c - a)
    al = a - ah
    p = a * a
    e = ((ah * ah - p) + 2.0 * ah * al) + al * al
    c = 134217729.0 * b
    bh = c - (c - b)
    bl = b - bh
    q = b * b
    f = ((bh * bh - q) + 2.0 * bh * bl) + bl * bl
    s = p - 1.0
    t = (p - (s + 1.0)) + (-1.0 - (s - p))  # two-sum: s + t == p - 1 exactly
    u = s + q
    v = (s - (u - q)) + (q - (u - (u - q)))
    return u + (t + v + e + f)
''',
    "complex_divide": '''def complex_divide(a, b):
    """numpy's complex quotient a / b: Smith's algorithm (scaled by the larger part of b, so
    no intermediate overflows needlessly); a zero b gives inf or NaN parts, not an error."""
    a = np.complex128(a)
    b = np.complex128(b)
    br, bi = b.real, b.imag
    if abs(br) >= abs(bi):
        if br == 0 and bi == 0:
            return complex(a.real / abs(br), a.imag / abs(br))
        ratio = bi / br
        scale = 1.0 / (br + bi * ratio)
        return complex((a.real + a.imag * ratio) * scale, (a.imag - a.real * ratio) * scale)
    ratio = br / bi
    scale = 1.0 / (bi + br * ratio)
    return complex((a.real * ratio + a.imag) * scale, (a.imag * ratio - a.real) * scale)
''',
}
