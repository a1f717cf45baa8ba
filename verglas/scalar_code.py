"""How generated code writes a scalar op, shared by both backends: numpy's semantics where a
scalar op's one `impl` (written for floats) is not enough.

- `loop_dtypes`: numpy computes a ufunc in its loop's dtypes (float32 ** int32 in float64,
  int64 < float64 in float64); generated code converts the arguments first, as numpy does.
- `variant`: the expression (over x, y, z) an op takes for arguments of other kinds: complex
  numbers (cmath, numpy's lexicographic order, Smith's division), signed integers (numpy
  wraps around; numba marks signed +, -, * no-signed-wrap, so LLVM may assume no overflow:
  it folded x + INT64_MIN into x | INT64_MIN), integers' floor, the parts of a real number.
- `HELPERS`: the functions those expressions call, as source using only math, cmath and np:
  the CPU backend jits them, CUDA kernels paste them in as nested functions.
- `emit_scalar`: a scalar op (a Composite's graph inlined) on argument expressions, each op
  converted to its loop's dtypes and written by the backend's own `write_op`.

An expression names `ITYPE` where it needs the arguments' dtype (np.<dtype>).
"""

from __future__ import annotations

import functools
import re

import numpy as np

from verglas.graph import Constant
from verglas.ops.scalar import Cast

__all__ = ["loop_dtypes", "variant", "helpers_in", "HELPERS", "arith", "emit_scalar",
           "substitute"]


@functools.cache
def loop_dtypes(sop, dtypes: tuple) -> tuple | None:
    """The input dtypes of the numpy loop `sop`'s ufunc uses for arguments of `dtypes`, or
    None (no ufunc, or no such loop)."""
    ufunc = getattr(sop, "ufunc", None)
    if ufunc is None and len(dtypes) == 1 and getattr(sop, "nin", 0) == 1 \
            and not isinstance(sop, Cast):
        # a float function without a ufunc (sigmoid, softplus, erf): numpy-like, it computes in
        # its result's float dtype (an integer or bool argument converted first)
        try:
            (out,) = sop.output_dtypes(*dtypes)
        except TypeError:
            return None
        return (out,) if np.dtype(out).kind in "fc" and np.dtype(dtypes[0]).kind in "biu" \
            else None
    if ufunc is None or len(dtypes) != ufunc.nin:
        return None
    try:
        loop = ufunc.resolve_dtypes(tuple(np.dtype(d) for d in dtypes) + (None,) * ufunc.nout)
    except (TypeError, ValueError):
        return None
    return tuple(d.name for d in loop[:ufunc.nin])


# complex arguments: cmath, and numpy's definitions where they differ from Python's
_COMPLEX = {
    "exp": "complex_exp(x)", "log": "complex_log(x)", "sqrt": "cmath.sqrt(x)",
    "sin": "cmath.sin(x)", "cos": "cmath.cos(x)", "tan": "cmath.tan(x)",
    "tanh": "cmath.tanh(x)", "expm1": "(complex_exp(x) - 1)", "log1p": "cmath.log(1 + x)",
    "isinf": "cmath.isinf(x)", "sign": "complex_sign(x)",
    "lt": "complex_lt(x, y)", "le": "complex_le(x, y)", "gt": "complex_lt(y, x)",
    "ge": "complex_le(y, x)", "maximum": "complex_maximum(x, y)",
    "minimum": "complex_minimum(x, y)", "clip": "complex_minimum(complex_maximum(x, y), z)",
    "true_div": "complex_divide(x, y)", "reciprocal": "complex_divide(1, x)",
}
# signed integers: in uint64, where +, - and * wrap around (the cast to the result's dtype
# keeps the low bits); INT_MIN // -1 is INT_MIN (numba's // gives 0)
_SIGNED = {
    "add": "(np.uint64(x) + np.uint64(y))", "sub": "(np.uint64(x) - np.uint64(y))",
    "mul": "(np.uint64(x) * np.uint64(y))", "neg": "(np.uint64(0) - np.uint64(x))",
    "floor_div": "(ITYPE(np.uint64(0) - np.uint64(x)) if y == -1 else x // y)",
}
_INTEGER = {"floor": "x", "ceil": "x"}  # an integer is its own floor (math.floor goes through a
# float: int64 values lose their low bits)
_REAL = {"real": "x", "conj": "x", "imag": "0"}


def variant(sop, arg_dtypes) -> str | None:
    """The expression of `sop` for arguments of `arg_dtypes` (already numpy's loop dtypes)
    where its `impl` does not give numpy's result, else None."""
    kinds = {np.dtype(d).kind for d in arg_dtypes}
    name = sop.name
    if "c" in kinds:
        return _COMPLEX.get(name)
    if kinds <= {"i", "u", "b"} and name in _INTEGER:
        return _INTEGER[name]
    if name in _REAL:
        return _REAL[name]
    if name == "pow" and kinds <= {"i", "u", "b"}:
        return "int_power(x, y)"
    if kinds == {"i"} and len(set(arg_dtypes)) == 1 and name in _SIGNED:
        return _SIGNED[name].replace("ITYPE", f"np.{arg_dtypes[0]}")
    return None


def arith(op: str, a: str, b: str, dtype: str) -> str:
    """`a op b` (op "+" or "*") computed in `dtype` with numpy's wraparound; the caller
    converts the result to `dtype`."""
    if np.dtype(dtype).kind == "i":
        return f"(np.uint64({a}) {op} np.uint64({b}))"
    return f"({a} {op} {b})"


def emit_scalar(sop, args: list[str], arg_dtypes: list[str], out_dtypes, *, literal, cast,
                write_op) -> list[str]:
    """The names of `sop`'s results on expressions `args`: a Composite's frozen scalar graph
    inlined node by node (constants as `literal(value, dtype)`), every other op's arguments
    converted (`cast(expr, dtype)`) to the dtypes numpy's loop computes in, then
    `write_op(sop, args, arg_dtypes, out_dtype)` emitting it and returning its name."""
    inner = getattr(sop, "fgraph", None)
    if inner is not None:
        values = dict(zip(inner.inputs, args))
        for node in inner.toposort():
            ins = [literal(v.data, v.type.dtype) if isinstance(v, Constant) else values[v]
                   for v in node.inputs]
            outs = emit_scalar(node.op, ins, [v.type.dtype for v in node.inputs],
                               [o.type.dtype for o in node.outputs], literal=literal,
                               cast=cast, write_op=write_op)
            values.update(zip(node.outputs, outs))
        return [literal(o.data, o.type.dtype) if isinstance(o, Constant) else values[o]
                for o in inner.outputs]
    (out_dtype,) = out_dtypes
    loop = loop_dtypes(sop, tuple(arg_dtypes))
    if loop is not None:  # (numba's promotion differs: float32 ** int32 stays float32 there,
        # int64 < float64 compares exactly)
        args = [a if d == want else cast(a, want) for a, d, want in zip(args, arg_dtypes, loop)]
        arg_dtypes = list(loop)
    return [write_op(sop, args, list(arg_dtypes), out_dtype)]


def substitute(expr: str, args: list[str]) -> str:
    """`expr` (over x, y, z) with the argument expressions put in."""
    names = dict(zip(("x", "y", "z"), args))
    return re.sub(r"\b[xyz]\b", lambda m: f"({names[m.group(0)]})", expr)


def helpers_in(expr: str) -> list[str]:
    """The HELPERS an expression calls (helpers calling helpers first)."""
    found: list[str] = []
    seen: set[str] = set()

    def visit(text):
        for name in re.findall(r"\b\w+(?=\()", text):
            if name in HELPERS and name not in seen:
                seen.add(name)
                visit(HELPERS[name])
                found.append(name)

    visit(expr)
    return found


HELPERS = {
    # a product no fast-math flag reaches: the CPU backend compiles its helpers into loops
    # flagged 'reassoc' and 'contract', which would re-associate it (it substitutes an
    # intrinsic for this def); CUDA kernels compile without such flags
    "strict_mul": '''def strict_mul(a, b):
    return a * b
''',
    "int_power": '''def int_power(x, y):
    """numpy's integer power: an error for a negative exponent, else repeated squaring with
    wraparound (in uint64: the caller keeps the result's low bits)."""
    if y < 0:
        raise ValueError("Integers to negative integer powers are not allowed.")
    result = np.uint64(1)
    base = np.uint64(x)
    e = np.uint64(y)
    while e > 0:
        if e & np.uint64(1):
            result = result * base
        base = base * base
        e = e >> np.uint64(1)
    return result
''',
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
    the low digits of a small result (|z| = 1 + 6.5e-6: 4e-12 relative off)."""
    r = cmath.log(np.complex128(z))
    a, b = abs(z.real), abs(z.imag)
    if 0.71 <= math.hypot(a, b) <= 1.73:  # (NaN and inf parts keep cmath's answer)
        return complex(0.5 * math.log1p(sum_squares_minus_one(a, b)), r.imag)
    return r
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
