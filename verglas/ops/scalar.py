"""Scalar ops: one scalar Python implementation each (`impl`, written with `math` so the same
source compiles under numba CPU and numba.cuda) plus the numpy function that is the reference.

A scalar op knows its output dtypes (numpy 2 rules, derived from the numpy function on empty
arrays). Its gradient is a tensor expression, so it is written in math.py next to the tensor
functions it uses (`grad_rule`); Elemwise.L_op sums it back to each input's shape.
"""

from __future__ import annotations

import math

import numpy as np

from verglas.graph.op import Op

__all__ = ["ScalarOp", "SCALAR_OPS"]

try:  # the reference erf: scipy's vectorised one when available
    from scipy.special import erf as _np_erf
except ImportError:  # pragma: no cover
    _np_erf = np.vectorize(math.erf, otypes=[np.float64])


class ScalarOp(Op):
    """An operation on scalars: `impl` (math-based scalar code) and `nfunc` (numpy reference)."""

    nin: int = 1
    nout: int = 1
    symbol: str = ""  # infix symbol for printing, when there is one
    commutative = False
    associative = False
    comparison = False  # numpy compares out-of-range Python ints exactly instead of overflowing
    ufunc = None  # the numpy ufunc with these semantics: it types weak Python scalars (NEP 50)
    typing_inputs = None  # positions of the inputs that type weak Python scalars (None: all)

    op_name: str = ""
    impl_expr: str | None = None  # set when `impl` is one expression over x, y, z

    @property
    def name(self) -> str:
        return self.op_name or type(self).__name__.lower()

    def nfunc(self, *args):
        raise NotImplementedError

    def output_dtypes(self, *dtypes) -> tuple[str, ...]:
        """numpy's result dtypes for inputs of `dtypes` (reference semantics)."""
        key = (type(self), self._props(), dtypes)
        cached = _DTYPE_CACHE.get(key)
        if cached is None:
            try:
                with np.errstate(all="ignore"):
                    out = self.nfunc(*[np.zeros(1, dtype=d) for d in dtypes])
            except TypeError as exc:  # numpy has no loop for these dtypes
                raise TypeError(f"{self.name}: not supported for dtypes "
                                f"{', '.join(dtypes)} ({exc})") from None
            outs = out if isinstance(out, tuple) else (out,)
            cached = tuple(np.asarray(o).dtype.name for o in outs)
            _DTYPE_CACHE[key] = cached
        return cached

    def perform_arrays(self, *arrays):
        """Reference result on numpy arrays (broadcasting), cast to numpy's dtypes."""
        with np.errstate(all="ignore"):
            out = self.nfunc(*arrays)
        return out if isinstance(out, tuple) else (out,)

    # (op, inputs, outputs, output_grads) -> one gradient or None per input, set by math.py
    grad_rule = None

    def grad(self, inputs, outputs, output_grads):
        """Gradients as tensor expressions; None where not differentiable."""
        if self.grad_rule is None:
            raise NotImplementedError(f"{self.name} has no gradient")
        return self.grad_rule(inputs, outputs, output_grads)

    def __repr__(self):
        return self.name if not self.__props__ else super().__repr__()

    def __str__(self):
        return repr(self)

    def fingerprint_key(self):
        return ("scalar", type(self).__qualname__) + tuple(repr(p) for p in self._props())


_DTYPE_CACHE: dict = {}
SCALAR_OPS: dict[str, type] = {}


def _register(cls):
    SCALAR_OPS[cls.op_name or cls.__name__.lower()] = cls
    return cls


_ARGS = ("x", "y", "z")


def impl_from_expr(expr: str, nin: int):
    """The scalar implementation whose body is the Python expression `expr` over x, y, z.

    An op defined this way keeps `impl_expr`, so code generators can inline the very same text.
    """
    return eval(f"lambda {', '.join(_ARGS[:nin])}: {expr}", {"math": math})


def _impl_attrs(impl, nin: int) -> dict:
    if isinstance(impl, str):
        return {"impl": staticmethod(impl_from_expr(impl, nin)), "impl_expr": impl}
    return {"impl": staticmethod(impl)}


def _class_name(name: str) -> str:
    return "".join(part.capitalize() for part in name.strip("_").split("_"))


# -- unary ---------------------------------------------------------------------------------------
class UnaryScalarOp(ScalarOp):
    nin = 1


@_register
class Neg(UnaryScalarOp):
    symbol = "-"

    impl_expr = "-x"
    impl = staticmethod(impl_from_expr(impl_expr, 1))

    def nfunc(self, x):
        return np.negative(x)  # numpy refuses bools (TypeError): so do we


@_register
class Abs(UnaryScalarOp):
    impl_expr = "abs(x)"
    impl = staticmethod(impl_from_expr(impl_expr, 1))

    def nfunc(self, x):
        return np.abs(x)


@_register
class Sign(UnaryScalarOp):
    impl_expr = "(1 if x > 0 else (-1 if x < 0 else (x if x != x else 0)))"  # NaN stays; -0.0 -> 0
    impl = staticmethod(impl_from_expr(impl_expr, 1))

    def nfunc(self, x):
        return np.sign(x)  # numpy refuses bools (TypeError): so do we


def _sigmoid_impl(x):
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def _real_only(name, x):
    if np.asarray(x).dtype.kind == "c":  # as scipy's expit and numpy's logaddexp
        raise TypeError(f"{name}: not supported for complex input")


def _np_sigmoid(x):
    x = np.asarray(x)
    _real_only("sigmoid", x)
    dt = np.exp(np.zeros(1, x.dtype)).dtype
    xf = x.astype(dt)
    with np.errstate(over="ignore"):
        e = np.exp(-np.abs(xf))
        return np.where(xf >= 0, 1 / (1 + e), e / (1 + e)).astype(dt)


def _softplus_impl(x):
    if x > 30.0:
        return x + math.log1p(math.exp(-x))
    return math.log1p(math.exp(x))


def _np_softplus(x):
    x = np.asarray(x)
    _real_only("softplus", x)
    dt = np.exp(np.zeros(1, x.dtype)).dtype
    return np.logaddexp(np.zeros((), dt), x.astype(dt)).astype(dt)


def _np_erf_typed(x):
    x = np.asarray(x)
    _real_only("erf", x)
    dt = np.exp(np.zeros(1, x.dtype)).dtype
    return np.asarray(_np_erf(x.astype(dt))).astype(dt)


def _numpy_typed(name, nfunc, impl):
    """A unary scalar op whose result dtype is numpy's own (`nfunc` types it: exp and sin of
    ints give floats, floor and ceil keep ints and bools, the predicates give bools, the
    complex parts reals)."""
    cls = type(_class_name(name), (UnaryScalarOp,), {
        "op_name": name,
        **_impl_attrs(impl, 1),
        "nfunc": lambda self, x, _f=nfunc: _f(x),
        "__module__": __name__,
        "__qualname__": _class_name(name),
    })
    return _register(cls)


Exp = _numpy_typed("exp", np.exp, "math.exp(x)")
Log = _numpy_typed("log", np.log, "(math.log(x) if x > 0 else (-math.inf if x == 0 else math.nan))")
Log1p = _numpy_typed("log1p", np.log1p,
                     "(math.log1p(x) if x > -1 else (-math.inf if x == -1 else math.nan))")
Expm1 = _numpy_typed("expm1", np.expm1, "math.expm1(x)")
Sqrt = _numpy_typed("sqrt", np.sqrt, "(math.sqrt(x) if x >= 0 else math.nan)")
Sin = _numpy_typed("sin", np.sin, "math.sin(x)")
Cos = _numpy_typed("cos", np.cos, "math.cos(x)")
Tan = _numpy_typed("tan", np.tan, "math.tan(x)")
Tanh = _numpy_typed("tanh", np.tanh, "math.tanh(x)")
Sigmoid = _numpy_typed("sigmoid", _np_sigmoid, _sigmoid_impl)
Softplus = _numpy_typed("softplus", _np_softplus, _softplus_impl)
Erf = _numpy_typed("erf", _np_erf_typed, "math.erf(x)")
Sqr = _numpy_typed("sqr", np.square, "x * x")
Reciprocal = _numpy_typed("reciprocal", lambda x: np.divide(1, x), "1.0 / x")


# math.floor returns an int: kept for the floats it holds exactly (|x| < 2**52, where it is
# the answer), with x's sign (floor(-0.0) and ceil(-0.5) are -0.0); NaN, inf and larger
# values are integers already
_BIG = "4503599627370496.0"
Floor = _numpy_typed("floor", np.floor,
                  f"(math.copysign(math.floor(x), x) if abs(x) < {_BIG} else x)")
Ceil = _numpy_typed("ceil", np.ceil, f"(math.copysign(math.ceil(x), x) if abs(x) < {_BIG} else x)")


Isnan = _numpy_typed("isnan", np.isnan, "x != x")
Isinf = _numpy_typed("isinf", np.isinf, "(x == math.inf or x == -math.inf)")
Invert = _numpy_typed("invert", np.invert, "~x")
# complex parts (a real input is its own real part, with a zero imaginary part)
Real = _numpy_typed("real", np.real, "x.real")
Imag = _numpy_typed("imag", np.imag, "x.imag")
Conj = _numpy_typed("conj", np.conjugate, "x.conjugate()")


@_register
class Identity(UnaryScalarOp):
    impl_expr = "x"
    impl = staticmethod(impl_from_expr(impl_expr, 1))

    def nfunc(self, x):
        return x.copy()


@_register
class StopGradient(Identity):
    """The identity, with no gradient: a value that only shifts a computation for its
    numerics (softmax's maximum), whose gradient would cancel in exact arithmetic. Being an
    Identity, canonicalization removes it once gradients are built."""

    op_name = "stop_gradient"


@_register
class Cast(UnaryScalarOp):
    """Conversion to `dtype` (numpy's astype, unsafe casting)."""

    __props__ = ("dtype",)

    def __init__(self, dtype):
        self.dtype = np.dtype(dtype).name

    @property
    def name(self):
        return f"cast<{self.dtype}>"

    @staticmethod
    def impl(x):  # the backend wraps this with the target dtype's constructor
        return x

    def nfunc(self, x):
        with np.errstate(all="ignore"):
            return np.asarray(x).astype(self.dtype)

    def output_dtypes(self, *dtypes):
        return (self.dtype,)


# -- binary --------------------------------------------------------------------------------------
class BinaryScalarOp(ScalarOp):
    nin = 2


def _binary(name, nfunc, impl, symbol="", commutative=False, associative=False,
            comparison=False, ufunc=None):
    cls = type(_class_name(name), (BinaryScalarOp,), {
        "op_name": name,
        **_impl_attrs(impl, 2),
        "nfunc": lambda self, x, y, _f=nfunc: _f(x, y),
        "symbol": symbol,
        "commutative": commutative,
        "associative": associative,
        "comparison": comparison,
        "ufunc": ufunc if ufunc is not None else (nfunc if isinstance(nfunc, np.ufunc) else None),
        "__module__": __name__,
        "__qualname__": _class_name(name),
    })
    return _register(cls)


def _np_add(x, y):
    return np.logical_or(x, y) if x.dtype == bool and y.dtype == bool else np.add(x, y)


def _np_mul(x, y):
    return np.logical_and(x, y) if x.dtype == bool and y.dtype == bool else np.multiply(x, y)


def _np_pow(x, y):
    if np.dtype(y.dtype).kind in "iu" and np.dtype(x.dtype).kind in "iub" and np.any(y < 0):
        raise ValueError("pow: integers to negative integer powers are not allowed")
    return np.power(x, y)


def _pow_impl(x, y):
    return x ** y


Add = _binary("add", _np_add, "x + y", "+", True, True, ufunc=np.add)
Sub = _binary("sub", np.subtract, "x - y", "-")
Mul = _binary("mul", _np_mul, "x * y", "*", True, True, ufunc=np.multiply)
TrueDiv = _binary("true_div", np.true_divide, "x / y", "/")
FloorDiv = _binary("floor_div", np.floor_divide, "x // y", "//")
Mod = _binary("mod", np.remainder, "x % y", "%")
Pow = _binary("pow", _np_pow, _pow_impl, "**", ufunc=np.power)
# numpy's maximum/minimum: NaN propagates, and a tie gives the second operand (maximum(-0.0,
# 0.0) is 0.0, maximum(0.0, -0.0) is -0.0)
Maximum = _binary("maximum", np.maximum, "(x if (x > y or x != x) else y)", "", True, True)
Minimum = _binary("minimum", np.minimum, "(x if (x < y or x != x) else y)", "", True, True)
Lt = _binary("lt", np.less, "x < y", "<", comparison=True)
Le = _binary("le", np.less_equal, "x <= y", "<=", comparison=True)
Gt = _binary("gt", np.greater, "x > y", ">", comparison=True)
Ge = _binary("ge", np.greater_equal, "x >= y", ">=", comparison=True)
Eq = _binary("eq", np.equal, "x == y", "==", True, comparison=True)
Neq = _binary("neq", np.not_equal, "x != y", "!=", True, comparison=True)
And = _binary("and_", np.bitwise_and, "x & y", "&", True, True)
Or = _binary("or_", np.bitwise_or, "x | y", "|", True, True)
Xor = _binary("xor", np.bitwise_xor, "x ^ y", "^", True, True)
# numpy shifts by the amount as unsigned: a shift by the bit width or more (or by a negative
# amount) gives 0, or -1 for negative values shifted right (LLVM's shl/ashr give poison there)
LeftShift = _binary("left_shift", np.left_shift, "((x << y) if y >= 0 and y < 64 else 0)",
                    "<<", ufunc=np.left_shift)
RightShift = _binary("right_shift", np.right_shift,
                     "((x >> y) if y >= 0 and y < 64 else (-1 if x < 0 else 0))", ">>",
                     ufunc=np.right_shift)


# -- ternary -------------------------------------------------------------------------------------
@_register
class Switch(ScalarOp):
    """where(cond, a, b)."""

    nin = 3
    typing_inputs = (1, 2)  # the condition's bool does not type a weak branch value

    impl_expr = "(y if x else z)"
    impl = staticmethod(impl_from_expr(impl_expr, 3))

    def nfunc(self, c, a, b):
        return np.where(c, a, b)

    def output_dtypes(self, c, a, b):
        return (np.result_type(a, b).name,)


def _clip_lower(x, y):
    return f"({y} if ({x} < {y} or {y} != {y}) else {x})"


@_register
class Clip(ScalarOp):
    """numpy's clip with both bounds: x limited to [lo, hi]; NaN anywhere gives NaN and a
    tie keeps x (clip(-0.0, 0.0, 1.0) is -0.0), unlike maximum then minimum."""

    nin = 3
    impl_expr = f"(z if ({_clip_lower('x', 'y')} > z or z != z) else {_clip_lower('x', 'y')})"
    impl = staticmethod(impl_from_expr(impl_expr, 3))
    ufunc = getattr(getattr(np, "_core", np.core), "umath").clip

    def nfunc(self, x, lo, hi):
        return np.clip(x, lo, hi)


def _max_of(x, y):
    return f"({x} if ({x} != {x} or {x} > {y}) else {y})"


@_register
class ClipToBound(Clip):
    """numpy's clip with a bound of more than one value (vg.clip decides by static shapes):
    its loop is maximum then minimum, so a tie gives the bound (clip(-0.0, [0.0, 1.0], 1.0)
    starts with 0.0, fuzzer seed 18516; for two one-value bounds numpy's loop keeps x: Clip).
    NaN anywhere gives NaN, as Clip. A bound whose length is 1 only at run time is taken as
    one of more values: numpy then keeps x on a tie where this gives the bound."""

    op_name = "clip_to_bound"
    impl_expr = (f"({_max_of('x', 'y')} if ({_max_of('x', 'y')} != {_max_of('x', 'y')} "
                 f"or {_max_of('x', 'y')} < z) else z)")
    impl = staticmethod(impl_from_expr(impl_expr, 3))


@_register
class Second(ScalarOp):
    """second(x, y) = y: broadcasts y to the shape of x (fills)."""

    nin = 2

    impl_expr = "y"
    impl = staticmethod(impl_from_expr(impl_expr, 2))

    def nfunc(self, x, y):
        return np.broadcast_arrays(x, y)[1].copy()

    def output_dtypes(self, x, y):
        return (y,)
