"""User-facing elementwise functions (numpy names), built on Elemwise of scalar ops, and the
gradient of each scalar op (a tensor expression in these functions)."""

from __future__ import annotations

import builtins
import math

import numpy as np

from verglas.graph.basic import Variable
from verglas.ops import scalar as s
from verglas.ops.basic import as_tensor, is_python_scalar
from verglas.ops.elemwise import elemwise

__all__ = [
    "add", "sub", "mul", "true_divide", "divide", "floor_divide", "mod", "power", "neg", "abs",
    "sign", "exp", "log", "log1p", "expm1", "sqrt", "sqr", "sin", "cos", "tan", "tanh", "sigmoid",
    "softplus", "erf", "floor", "ceil", "reciprocal", "maximum", "minimum", "where", "clip",
    "isnan", "isinf", "eq", "neq", "lt", "le", "gt", "ge", "bitwise_and", "bitwise_or",
    "bitwise_xor", "left_shift", "right_shift", "invert", "real", "imag", "conj", "logical_and",
    "logical_or", "logical_not", "cast", "second", "zeros_like", "ones_like", "full_like",
    "identity", "stop_gradient",
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
stop_gradient = _unary(s.StopGradient)
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
        # numpy's ties depend on its loop: x where both bounds are one value (its loop for
        # scalar bounds), else the bound (see ClipToBound)
        arrays = any(not is_python_scalar(b) and any(d != 1 for d in as_tensor(b).type.shape)
                     for b in (lo, hi))
        return elemwise(_op(s.ClipToBound if arrays else s.Clip), x, lo, hi)
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


# -- gradients of the scalar ops ------------------------------------------------------------------
# A scalar op's gradient is a tensor expression in the functions above, so it is written here:
# ScalarOp.grad calls its class's `grad_rule(op, inputs, outputs, output_grads)` and
# Elemwise.L_op sums each result back to its input's shape. None: no gradient for that input.
def _float_like(g, x):
    """`g` as the gradient of `x`: None for integer/bool inputs."""
    return g if np.dtype(x.dtype).kind in "fc" else None


def _rule(*ops):
    """Decorator: the function is the gradient rule of the scalar op classes `ops`."""

    def register(rule):
        for op in ops:
            op.grad_rule = rule
        return rule

    return register


@_rule(s.Isnan, s.Isinf, s.Invert, s.Real, s.Imag, s.Conj)
def _unary_not_differentiable(op, inputs, outputs, gz):
    return [None]


@_rule(s.FloorDiv, s.Lt, s.Le, s.Gt, s.Ge, s.Eq, s.Neq, s.And, s.Or, s.Xor, s.LeftShift,
       s.RightShift)
def _binary_not_differentiable(op, inputs, outputs, gz):
    return [None, None]


@_rule(s.Neg)
def _neg_grad(op, inputs, outputs, gz):
    return [_float_like(-gz[0], inputs[0])]


@_rule(s.Abs)
def _abs_grad(op, inputs, outputs, gz):
    return [_float_like(gz[0] * sign(inputs[0]), inputs[0])]


@_rule(s.Sign, s.Floor, s.Ceil)
def _piecewise_constant_grad(op, inputs, outputs, gz):
    return [_float_like(zeros_like(inputs[0]), inputs[0])]


@_rule(s.Identity)
def _identity_grad(op, inputs, outputs, gz):
    if isinstance(op, s.StopGradient):
        return [None]
    return [_float_like(gz[0], inputs[0])]


@_rule(s.Cast)
def _cast_grad(op, inputs, outputs, gz):
    (x,) = inputs
    if np.dtype(x.dtype).kind not in "fc" or np.dtype(op.dtype).kind not in "fc":
        return [None]
    return [cast(gz[0], x.dtype)]


_FLOAT_UNARY = {  # float unary ops: the gradient from the input x, the output y and its gradient g
    s.Exp: lambda x, y, g: g * y,
    s.Log: lambda x, y, g: g / x,
    s.Log1p: lambda x, y, g: g / (1 + x),
    s.Expm1: lambda x, y, g: g * (y + 1),
    s.Sqrt: lambda x, y, g: g / (2 * y),
    s.Sin: lambda x, y, g: g * cos(x),
    s.Cos: lambda x, y, g: -g * sin(x),
    s.Tan: lambda x, y, g: g * (1 + y * y),
    s.Tanh: lambda x, y, g: g * (1 - y * y),
    s.Sigmoid: lambda x, y, g: g * y * (1 - y),
    s.Softplus: lambda x, y, g: g * sigmoid(x),
    s.Erf: lambda x, y, g: g * (2 / math.sqrt(math.pi)) * exp(-x * x),
    s.Sqr: lambda x, y, g: g * 2 * x,
    s.Reciprocal: lambda x, y, g: -g * y * y,
}


@_rule(*_FLOAT_UNARY)
def _float_unary_grad(op, inputs, outputs, gz):
    (x,), (y,), (g,) = inputs, outputs, gz
    if np.dtype(x.dtype).kind not in "fc":
        return [None]
    return [_FLOAT_UNARY[type(op)](x, y, g)]


def _pow_grad(x, y, z, g):
    gx = g * y * power(x, y - 1)
    gy = g * z * log(where(eq(x, 0), 1, x)) if np.dtype(y.dtype).kind in "fc" else None
    return gx, gy


def _maximum_grad(x, y, z, g):
    # ties share the gradient equally, as JAX does
    wx = where(gt(x, y), 1.0, where(eq(x, y), 0.5, 0.0))
    return g * wx, g * (1 - wx)


def _minimum_grad(x, y, z, g):
    wx = where(lt(x, y), 1.0, where(eq(x, y), 0.5, 0.0))
    return g * wx, g * (1 - wx)


_BINARY = {  # binary ops: (gradient of x, of y) from x, y, the output z and its gradient g
    s.Add: lambda x, y, z, g: (g, g),
    s.Sub: lambda x, y, z, g: (g, -g),
    s.Mul: lambda x, y, z, g: (g * y, g * x),
    s.TrueDiv: lambda x, y, z, g: (g / y, -g * z / y),
    s.Mod: lambda x, y, z, g: (g, -g * floor_divide(x, y)),
    s.Pow: _pow_grad,
    s.Maximum: _maximum_grad,
    s.Minimum: _minimum_grad,
}


@_rule(*_BINARY)
def _binary_grad(op, inputs, outputs, gz):
    (x, y), (z,), (g,) = inputs, outputs, gz
    gx, gy = _BINARY[type(op)](x, y, z, g)
    return [_float_like(gx, x) if gx is not None else None,
            _float_like(gy, y) if gy is not None else None]


@_rule(s.Switch)
def _switch_grad(op, inputs, outputs, gz):
    c, a, b = inputs
    (g,) = gz
    zero = zeros_like(g)
    return [None, _float_like(where(c, g, zero), a), _float_like(where(c, zero, g), b)]


@_rule(s.Clip)
def _clip_grad(op, inputs, outputs, gz):
    x, lo, hi = inputs
    (g,) = gz
    zero = zeros_like(g)
    below, above = lt(x, lo), gt(maximum(x, lo), hi)
    inside = logical_not(logical_or(below, above))
    return [_float_like(where(inside, g, zero), x),
            _float_like(where(logical_and(below, logical_not(above)), g, zero), lo),
            _float_like(where(above, g, zero), hi)]


@_rule(s.Second)
def _second_grad(op, inputs, outputs, gz):
    return [None, _float_like(gz[0], inputs[1])]


_ = builtins
