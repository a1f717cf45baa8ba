"""User-facing elementwise functions (numpy names), built on Elemwise of scalar ops."""

from __future__ import annotations

import builtins

import numpy as np

from verglas.graph.basic import Variable
from verglas.ops import scalar as s
from verglas.ops.elemwise import elemwise
from verglas.ops.variable import as_tensor, is_python_scalar

__all__ = [
    "add", "sub", "mul", "true_divide", "divide", "floor_divide", "mod", "power", "neg", "abs",
    "sign", "exp", "log", "log1p", "expm1", "sqrt", "sqr", "sin", "cos", "tan", "tanh", "sigmoid",
    "softplus", "erf", "floor", "ceil", "reciprocal", "maximum", "minimum", "where", "clip",
    "isnan", "isinf", "eq", "neq", "lt", "le", "gt", "ge", "bitwise_and", "bitwise_or",
    "bitwise_xor", "left_shift", "right_shift", "invert", "real", "imag", "conj", "logical_and",
    "logical_or", "logical_not", "cast", "second", "zeros_like", "ones_like", "full_like",
    "identity",
]

_S = {}


def _op(cls, *args):
    op = _S.get(cls)
    if op is None:
        op = _S[cls] = cls()
    return op


def _unary(cls):
    def f(x):
        return elemwise(_op(cls), x)

    return f


def _binary(cls):
    def f(x, y):
        return elemwise(_op(cls), x, y)

    return f


add, sub, mul = _binary(s.Add), _binary(s.Sub), _binary(s.Mul)
true_divide = divide = _binary(s.TrueDiv)
floor_divide, mod, power = _binary(s.FloorDiv), _binary(s.Mod), _binary(s.Pow)
maximum, minimum = _binary(s.Maximum), _binary(s.Minimum)
eq, neq, lt, le, gt, ge = (_binary(c) for c in (s.Eq, s.Neq, s.Lt, s.Le, s.Gt, s.Ge))
bitwise_and, bitwise_or, bitwise_xor = _binary(s.And), _binary(s.Or), _binary(s.Xor)
left_shift, right_shift = _binary(s.LeftShift), _binary(s.RightShift)
neg, abs, sign = _unary(s.Neg), _unary(s.Abs), _unary(s.Sign)
exp, log, log1p, expm1 = _unary(s.Exp), _unary(s.Log), _unary(s.Log1p), _unary(s.Expm1)
sqrt, sqr, reciprocal = _unary(s.Sqrt), _unary(s.Sqr), _unary(s.Reciprocal)
sin, cos, tan, tanh = _unary(s.Sin), _unary(s.Cos), _unary(s.Tan), _unary(s.Tanh)
sigmoid, softplus, erf = _unary(s.Sigmoid), _unary(s.Softplus), _unary(s.Erf)
floor, ceil = _unary(s.Floor), _unary(s.Ceil)
isnan, isinf, invert = _unary(s.Isnan), _unary(s.Isinf), _unary(s.Invert)
identity = _unary(s.Identity)
real, imag, conj = _unary(s.Real), _unary(s.Imag), _unary(s.Conj)
for _name in __all__:
    _f = globals().get(_name)
    if callable(_f) and getattr(_f, "__name__", "") == "f":
        _f.__name__ = _f.__qualname__ = _name
        _f.__doc__ = f"Elementwise {_name} (numpy semantics)."


def logical_and(x, y):
    """Elementwise logical and (inputs converted to bool)."""
    return bitwise_and(_truth(x, "logical_and"), _truth(y, "logical_and"))


def logical_or(x, y):
    """Elementwise logical or (inputs converted to bool)."""
    return bitwise_or(_truth(x, "logical_or"), _truth(y, "logical_or"))


def _truth(x, name):
    """`x` as bool for a binary logical op. numpy's binary logical ufuncs take a Python int
    as a C long whatever the other operand: one beyond int64 raises OverflowError."""
    if _is_int_scalar(x) and not -2**63 <= x < 2**63:
        raise OverflowError(f"{name}: Python integer {x} does not fit in int64")
    return cast(x, "bool")


def logical_not(x):
    """Elementwise logical not."""
    return invert(cast(x, "bool"))


def cast(x, dtype):
    """`x` converted to `dtype` (numpy's unsafe astype)."""
    x = as_tensor(x)
    dtype = np.dtype(dtype).name
    if x.dtype == dtype:
        return x
    return elemwise(s.Cast(dtype), x)


def where(cond, x, y):
    """Elements of `x` where `cond` holds, else of `y` (broadcast)."""
    if is_python_scalar(cond):  # only its truth matters (2**64 is a valid condition)
        cond = bool(cond)
    cond = as_tensor(cond)  # never a weak scalar: a Python bool stays a bool
    if cond.dtype != "bool":
        cond = neq(cond, 0)
    return elemwise(_op(s.Switch), cond, x, y)


def clip(x, lo, hi):
    """Limit `x` to [lo, hi] (None for no bound). As numpy: a Python int bound beyond what an
    integer `x` holds bounds nothing on the side it lies (clip(uint8, -5, 300) changes
    nothing) and raises OverflowError on the other."""
    x = as_tensor(x)
    if np.dtype(x.dtype).kind in "iu":
        info = np.iinfo(x.dtype)
        if _is_int_scalar(lo) and lo < info.min:
            lo = None
        if _is_int_scalar(hi) and hi > info.max:
            hi = None
    if lo is not None and hi is not None:
        return elemwise(_op(s.Clip), x, lo, hi)
    if lo is not None:  # one bound: numpy's maximum / minimum (a tie gives the bound)
        x = maximum(x, lo)
    if hi is not None:
        x = minimum(x, hi)
    return x


def _is_int_scalar(v) -> bool:
    return is_python_scalar(v) and isinstance(v, int) and not isinstance(v, bool)


def second(x, y):
    """`y` broadcast to the shape of `x` (and `y`): numpy's `broadcast_arrays(x, y)[1]`."""
    return elemwise(_op(s.Second), x, y)


def full_like(x, value, dtype=None):
    """An array of `value` with the shape of `x` (dtype of `x` unless given)."""
    x = as_tensor(x)
    dtype = x.dtype if dtype is None else np.dtype(dtype).name
    if isinstance(value, Variable):
        if value.ndim != 0:
            raise ValueError(f"full_like: the fill value must be 0-d, got ndim {value.ndim}")
        return second(x, cast(value, dtype))
    return second(x, as_tensor(np.asarray(value, dtype=dtype)))


def zeros_like(x, dtype=None):
    """Zeros with the shape of `x`."""
    return full_like(x, 0, dtype)


def ones_like(x, dtype=None):
    """Ones with the shape of `x`."""
    return full_like(x, 1, dtype)


_ = builtins
