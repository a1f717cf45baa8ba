"""Canonicalization: algebra to one normal form, and no-op nodes removed.

Normal form of the associative-commutative ops (add, mul, maximum, minimum, and, or, xor):
constants last, and moved to the top of a chain where they combine into one (x+1+2 -> x+3,
(x*2)*3 -> x*6), so `1+x` and `x+1` merge and identities (x+0, x*1) become visible. Subtraction
of a constant becomes addition of its negation and division by a float constant multiplication
by its reciprocal, for the same reason. Everything here keeps numpy's dtypes and broadcasting:
an identity fires only when the other operand cannot broadcast `x` to a bigger shape.

IEEE semantics decide what may fire, signed zeros included:
- x + 0.0 -> x only where x cannot be -0.0 (-0.0 + 0.0 is +0.0); x - 0.0 and x + (-0.0) are
  identities for every x. 0.0 - x -> -x likewise does not fire for floats.
- x*0 -> 0 and x-x -> 0 fire for integers and bools only (inf*0 and inf-inf are NaN).
- exp(log(x)) -> x only where x >= 0 is known (exp, abs, sqr, sqrt, ...): log of a negative
  is NaN.
- log(exp(x)) -> x fires for every float x: equal wherever exp(x) is finite and nonzero, and
  where it is not (overflow to inf above ~709 for float64, ~88 for float32; underflow to 0
  below ~-745 / ~-103) x is the exact answer the original could not represent. JAX/XLA and
  PyTensor make the same choice: a rewrite may make a result more accurate, never less.
- x**0.5 -> sqrt(x) is exact: numpy's power special-cases 0.5 the same way (NaN at -inf).
- x**n for a constant integer 3 <= n <= 16 -> products by squaring (a few ulps from C pow's one
  rounding; infinities, NaNs, signed zeros, overflow and underflow as pow); x**1.5 ->
  x*sqrt(x), -inf given inf by a where as C pow does.
- x / c -> x * (1/c) only where 1/c is exact (c a power of two): otherwise x * (1/c) is
  not numpy's correctly rounded quotient (6.0 * (1/3) is 1.9999999999999998, whose floor
  is 1).
The stable softmax / logsumexp forms replace the naive ones in every compiled mode and inside
inner graphs alike, so an expression's numerics do not depend on where it sits.
"""

from __future__ import annotations

import numpy as np

from verglas.graph import Apply, Constant, Variable
from verglas.ops import math as m
from verglas.ops import scalar as s
from verglas.ops.basic import DimShuffle, MakeVector, Shape, ShapeI
from verglas.ops.elemwise import Elemwise, SumToShape
from verglas.ops.linalg import MatMul
from verglas.ops.reduce import Max, Reduce, Sum
from verglas.ops.shape import Alloc, Reshape
from verglas.rewrite.registry import phase_rule
from verglas.rewrite.utils import (broadcasts_nothing, const_like, constant_value, elemwise_op,
                                   first, is_constant, is_float, is_int_or_bool, same_as,
                                   scalar_constant, single_client)

__all__ = [
    "commutative_constant_last", "assoc_constants_combine", "assoc_constant_outward",
    "add_zero", "sub_zero", "mul_one", "div_one", "mul_zero", "neg_neg", "zero_minus",
    "sub_self", "sub_constant_to_add", "div_constant_to_mul", "pow_one", "pow_two_to_sqr",
    "pow_integer_to_products", "pow_one_and_a_half", "pow_half_to_sqrt",
    "pow_minus_one_to_reciprocal", "log_exp", "exp_log",
    "dimshuffle_dimshuffle", "dimshuffle_identity", "reshape_reshape", "reshape_useless",
    "alloc_useless", "cast_useless", "cast_cast", "identity_elemwise", "where_same",
    "where_constant_condition", "second_useless", "sum_to_shape_static", "reduce_reduce",
    "softmax_stable", "logsumexp_stable", "nonnegative",
]

CHEAP = ("fast_run", "fast_compile")
RUN = ("fast_run",)
STABILIZE = ("fast_run", "fast_compile", "stabilize")

_COMMUTATIVE = (s.Add, s.Mul, s.Maximum, s.Minimum, s.Eq, s.Neq, s.And, s.Or, s.Xor)
_ASSOCIATIVE = (s.Add, s.Mul, s.Maximum, s.Minimum, s.And, s.Or, s.Xor)


def _reorders_ties(node) -> bool:
    """Whether swapping or regrouping the operands of `node` could change its result: a float
    maximum/minimum gives its second operand on a tie (maximum(-0.0, 0.0) is 0.0,
    maximum(0.0, -0.0) is -0.0), so it is neither commutative nor associative bit for bit."""
    return isinstance(node.op.scalar_op, (s.Maximum, s.Minimum)) and any(
        np.dtype(v.dtype).kind in "fc" for v in node.inputs)


_rule = phase_rule("canonicalize", CHEAP)


def _identity(out: Variable, x: Variable, c: Variable, value) -> Variable | None:
    """`x` for `out = op(x, c)` when c holds `value` everywhere and broadcasts nothing."""
    v = scalar_constant(c)
    if v is None or v != value or not broadcasts_nothing(x, c):
        return None
    return same_as(out, x)


def _elemwise_inputs(var: Variable, scalar_cls) -> list | None:
    """The inputs of `var`'s Elemwise when its scalar op is a `scalar_cls`, else None."""
    sop = elemwise_op(var)
    return var.owner.inputs if isinstance(sop, scalar_cls) else None


# -- order and constants of associative-commutative chains -------------------------------------
@_rule(Elemwise, scalar_tracks=_COMMUTATIVE)
def commutative_constant_last(fgraph, node):
    """op(c, x) -> op(x, c) for a commutative op and constant c (so 1+x and x+1 merge)."""
    match node.inputs:
        case [c, x] if is_constant(c) and not is_constant(x) and not _reorders_ties(node):
            return first(same_as(node.outputs[0], node.op(x, c)))


@_rule(Elemwise, scalar_tracks=_ASSOCIATIVE, tags=RUN)
def assoc_constants_combine(fgraph, node):
    """(x op c1) op c2 -> x op (c1 op c2), computed in the output dtype: x+1+2 -> x+3.
    Float sums and products combine only where no rounding of the original is lost at a
    scale above the result's (`_float_regrouping_keeps_scale`)."""
    out = node.outputs[0]
    inner, c2 = node.inputs
    if not is_constant(c2) or elemwise_op(inner) != node.op.scalar_op \
            or inner.dtype != out.dtype or _reorders_ties(node):
        return None
    x, c1 = inner.owner.inputs
    if not is_constant(c1) or is_constant(x):
        return None
    dtype = out.dtype
    v1, v2 = constant_value(c1).astype(dtype), constant_value(c2).astype(dtype)
    if not _float_regrouping_keeps_scale(node.op.scalar_op, v1, v2):
        return None
    (value,) = node.op.scalar_op.perform_arrays(v1, v2)
    return first(same_as(out, node.op(x, const_like(value, dtype, out.ndim))))


def _float_regrouping_keeps_scale(sop, v1, v2) -> bool:
    """Whether (x op v1) op v2 may become x op (v1 op v2) in a float dtype. Float sums and
    products are not associative; the regrouping is kept to cases whose difference is a few
    roundings of the result. Sums: v1 and v2 of one sign, so they do not cancel: in
    (x + 2**63) - 2**63 the first sum drops a small x (the result is 0), and x + 0.0 would keep
    it. Products: |v1| and |v2| on one side of 1, so x * v1 overflows or underflows only where
    the whole product does: (x * 1e30) * 1e-30 is inf for x > 3.4e8 in float32. Complex
    constants are not regrouped. Integer and boolean ops wrap or are exact: always."""
    kind = np.dtype(v1.dtype).kind
    if kind not in "fc" or not isinstance(sop, (s.Add, s.Mul)):
        return True
    if kind == "c":
        return False
    with np.errstate(invalid="ignore"):
        if isinstance(sop, s.Add):
            return bool(np.all(np.sign(v1) * np.sign(v2) >= 0))
        return bool(np.all((np.abs(v1) - 1) * (np.abs(v2) - 1) >= 0))


@_rule(Elemwise, scalar_tracks=_ASSOCIATIVE, tags=RUN)
def assoc_constant_outward(fgraph, node):
    """(x op c) op y -> (x op y) op c, and y op (x op c) likewise: constants rise to the top
    of a chain, where they combine (one dtype throughout, inner result used once)."""
    out = node.outputs[0]
    sop = node.op.scalar_op
    if _reorders_ties(node):
        return None
    for k in (0, 1):
        inner, y = node.inputs[k], node.inputs[1 - k]
        if is_constant(y) or elemwise_op(inner) != sop or not single_client(fgraph, inner):
            continue
        x, c = inner.owner.inputs
        if not is_constant(c) or is_constant(x):
            continue
        if not (x.dtype == y.dtype == inner.dtype == out.dtype):
            continue
        pair = node.op(x, y) if k == 0 else node.op(y, x)
        return first(same_as(out, node.op(pair, c)))
    return None


# -- identities ----------------------------------------------------------------------------------
@_rule(Elemwise, scalar_tracks=(s.Add,))
def add_zero(fgraph, node):
    """x + 0 -> x (0 + x too): for floats only x + (-0.0), or x that cannot be -0.0, since
    -0.0 + 0.0 is +0.0 (and 1/x tells them apart)."""
    x, y = node.inputs
    out = node.outputs[0]
    return first(_add_identity(out, x, y), _add_identity(out, y, x))


def _add_identity(out, x, c):
    v = scalar_constant(c)
    if v is None or v != 0:
        return None
    if is_float(out) and not (np.signbit(v) or never_negative_zero(x)):
        return None
    return _identity(out, x, c, 0)


def never_negative_zero(x: Variable) -> bool:
    """True when x cannot hold -0.0: ints, bools, results >= +0 by construction, and sums
    (a float Sum or MatMul adds its terms to +0.0, as numpy's do, and in round-to-nearest no
    sum that starts at +0.0 is -0.0), seen through views that only rearrange elements."""
    while x.owner is not None and isinstance(x.owner.op, (DimShuffle, Reshape)):
        x = x.owner.inputs[0]
    return (not is_float(x) or x.owner is not None and isinstance(x.owner.op, (Sum, MatMul))
            or isinstance(elemwise_op(x), (s.Exp, s.Abs, s.Sqr, s.Sigmoid, s.Softplus)))


@_rule(Elemwise, scalar_tracks=(s.Sub,))
def sub_zero(fgraph, node):
    """x - 0 -> x."""
    x, c = node.inputs
    return first(_identity(node.outputs[0], x, c, 0))


@_rule(Elemwise, scalar_tracks=(s.Mul,))
def mul_one(fgraph, node):
    """x * 1 -> x (1 * x too)."""
    x, y = node.inputs
    out = node.outputs[0]
    return first(_identity(out, x, y, 1), _identity(out, y, x, 1))


@_rule(Elemwise, scalar_tracks=(s.TrueDiv,))
def div_one(fgraph, node):
    """x / 1 -> x (as the output dtype: int / 1 is a float)."""
    x, c = node.inputs
    return first(_identity(node.outputs[0], x, c, 1))


def _zeros_like(out: Variable, x: Variable, c: Variable | None = None) -> Variable | None:
    """Zeros of `out`'s dtype with the shape of x (broadcast with constant c's shape)."""
    shape = (1,) * out.ndim if c is None else c.type.shape
    zero = const_like(np.zeros(shape, out.dtype), out.dtype, out.ndim)
    return same_as(out, m.second(x, zero))


@_rule(Elemwise, scalar_tracks=(s.Mul,))
def mul_zero(fgraph, node):
    """x * 0 -> zeros, for integer and bool x only: for floats inf*0 and nan*0 are NaN."""
    out = node.outputs[0]
    if not is_int_or_bool(out):
        return None
    for x, c in (node.inputs, node.inputs[::-1]):
        if is_constant(c) and not is_constant(x) and is_int_or_bool(x):
            v = scalar_constant(c)
            if v is not None and v == 0:
                return first(_zeros_like(out, x, c))
    return None


@_rule(Elemwise, scalar_tracks=(s.Neg,))
def neg_neg(fgraph, node):
    """-(-x) -> x."""
    match node.inputs:
        case [Variable(owner=Apply(op=Elemwise(s.Neg()), inputs=[x]))]:
            return first(same_as(node.outputs[0], x))


@_rule(Elemwise, scalar_tracks=(s.Sub,))
def zero_minus(fgraph, node):
    """0 - x -> -x (for floats only (-0.0) - x: 0.0 - 0.0 is +0.0, -(0.0) is -0.0)."""
    c, x = node.inputs
    v = scalar_constant(c)
    if v is None or v != 0 or is_constant(x) or not broadcasts_nothing(x, c) \
            or x.dtype != node.outputs[0].dtype or x.dtype == "bool":
        return None
    if is_float(x) and not np.signbit(v):
        return None
    return first(same_as(node.outputs[0], m.neg(x)))


@_rule(Elemwise, scalar_tracks=(s.Sub,))
def sub_self(fgraph, node):
    """x - x -> zeros, for integers only (inf - inf is NaN)."""
    x, y = node.inputs
    out = node.outputs[0]
    if x is y and is_int_or_bool(out):
        return first(_zeros_like(out, x))
    return None


@_rule(Elemwise, scalar_tracks=(s.Sub,))
def sub_constant_to_add(fgraph, node):
    """x - c -> x + (-c): exact in IEEE and in wrapping integer arithmetic; constants then
    combine with the add chain (x + 1 - 1 -> x for integers)."""
    x, c = node.inputs
    out = node.outputs[0]
    if not is_constant(c) or is_constant(x) or out.dtype == "bool":
        return None
    value = constant_value(c).astype(out.dtype)
    with np.errstate(all="ignore"):
        negated = const_like(np.negative(value), out.dtype, out.ndim)
    return first(same_as(out, m.add(x, negated)))


@_rule(Elemwise, scalar_tracks=(s.TrueDiv,), tags=RUN)
def div_constant_to_mul(fgraph, node):
    """x / c -> x * (1/c) for a float constant c whose reciprocal is exact, finite and normal
    (a power of two)."""
    x, c = node.inputs
    out = node.outputs[0]
    if not is_constant(c) or is_constant(x) or out.dtype.startswith("complex") \
            or not is_float(out):
        return None
    value = constant_value(c).astype(out.dtype)
    with np.errstate(all="ignore"):
        inv = np.divide(np.ones((), out.dtype), value)
    tiny = np.finfo(out.dtype).tiny
    if not np.all(np.isfinite(inv)) or not np.all(np.abs(inv) >= tiny):
        return None
    if not np.all(np.frexp(value)[0] == np.where(value < 0, -0.5, 0.5)):  # a power of two
        return None
    return first(same_as(out, m.mul(x, const_like(inv, out.dtype, out.ndim))))


# -- powers, exp and log ---------------------------------------------------------------------------
def _pow_parts(node):
    """(x, exponent value) of pow(x, c) when c is one constant broadcasting nothing and x
    already has the output dtype; else None."""
    x, c = node.inputs
    if is_constant(x) or x.dtype != node.outputs[0].dtype or not broadcasts_nothing(x, c):
        return None
    v = scalar_constant(c)
    return None if v is None else (x, v)


@_rule(Elemwise, scalar_tracks=(s.Pow,))
def pow_one(fgraph, node):
    """x ** 1 -> x."""
    parts = _pow_parts(node)
    if parts is not None and parts[1] == 1:
        return first(same_as(node.outputs[0], parts[0]))
    return None


@_rule(Elemwise, scalar_tracks=(s.Pow,))
def pow_two_to_sqr(fgraph, node):
    """x ** 2 -> sqr(x)."""
    parts = _pow_parts(node)
    if parts is not None and parts[1] == 2 and parts[0].dtype != "bool":
        return first(same_as(node.outputs[0], m.sqr(parts[0])))
    return None


def _power_by_squaring(x, n: int):
    """x ** n (n >= 1) as products: squarings for n's binary digits, each digit's factor
    multiplied in from the lowest."""
    result, square = None, x
    while True:
        if n & 1:
            result = square if result is None else m.mul(result, square)
        n >>= 1
        if not n:
            return result
        square = m.sqr(square)


@_rule(Elemwise, scalar_tracks=(s.Pow,))
def pow_integer_to_products(fgraph, node):
    """x ** n -> products by squaring for a constant integer 3 <= n <= 16 (ints and floats,
    not bools or complex). Integers: the same wrapped result as numpy's integer power. Floats:
    two to five roundings instead of C pow's one (at most a few ulps apart), with the same
    infinities, NaNs and signed zeros (odd n keeps x's sign: (-0.0)**3 is -0.0 both ways) and
    the same overflow to inf and underflow to 0 (no intermediate square overflows where x**n
    stays finite: |x**2| <= |x**n| when |x| >= 1, and below 1 the squares only shrink)."""
    parts = _pow_parts(node)
    if parts is None or parts[0].dtype == "bool" or parts[0].dtype.startswith("complex"):
        return None
    n = parts[1]
    if not (float(n).is_integer() and 3 <= n <= 16):
        return None
    return first(same_as(node.outputs[0], _power_by_squaring(parts[0], int(n))))


@_rule(Elemwise, scalar_tracks=(s.Pow,))
def pow_one_and_a_half(fgraph, node):
    """x ** 1.5 -> x * sqrt(x) (real float x): NaN below zero both ways, (-0.0)**1.5 is +0.0
    both ways (-0.0 * -0.0); C pow makes (-inf)**1.5 +inf where the product is NaN, so -inf
    gets inf from a where."""
    parts = _pow_parts(node)
    if parts is None or parts[1] != 1.5 or not is_float(parts[0]) \
            or parts[0].dtype.startswith("complex"):
        return None
    x = parts[0]
    inf = const_like(np.inf, x.dtype, x.ndim)
    product = m.mul(x, m.sqrt(x))
    return first(same_as(node.outputs[0], m.where(m.eq(x, -inf), inf, product)))


@_rule(Elemwise, scalar_tracks=(s.Pow,))
def pow_half_to_sqrt(fgraph, node):
    """x ** 0.5 -> sqrt(x) (float x): numpy's power computes exactly this (power(-inf, 0.5)
    is NaN and power(-0.0, 0.5) is -0.0 in numpy, unlike C's pow)."""
    parts = _pow_parts(node)
    if parts is None or parts[1] != 0.5 or not is_float(parts[0]) \
            or parts[0].dtype.startswith("complex"):
        return None
    return first(same_as(node.outputs[0], m.sqrt(parts[0])))


@_rule(Elemwise, scalar_tracks=(s.Pow,))
def pow_minus_one_to_reciprocal(fgraph, node):
    """x ** -1 -> reciprocal(x) (float x; integers to negative powers are an error)."""
    parts = _pow_parts(node)
    if parts is not None and parts[1] == -1 and is_float(parts[0]):
        return first(same_as(node.outputs[0], m.reciprocal(parts[0])))
    return None


@_rule(Elemwise, scalar_tracks=(s.Log,))
def log_exp(fgraph, node):
    """log(exp(x)) -> x for float x (see the module doc for overflow)."""
    match node.inputs:
        case [Variable(owner=Apply(op=Elemwise(s.Exp()), inputs=[x]))] if is_float(x):
            return first(same_as(node.outputs[0], x))


# >= +0.0 or NaN (sqrt is not: sqrt(-0.0) is -0.0, and exp(log(-0.0)) is +0.0)
_NONNEGATIVE = (s.Exp, s.Abs, s.Sqr, s.Sigmoid, s.Softplus, s.Isnan, s.Isinf)


def nonnegative(var: Variable) -> bool:
    """True when every element of `var` is known >= 0 or NaN (from how it is computed)."""
    sop = elemwise_op(var)
    if isinstance(sop, _NONNEGATIVE):
        return True
    if var.dtype == "bool" or np.dtype(var.dtype).kind == "u":
        return True
    if isinstance(var, Constant) or is_constant(var):
        value = constant_value(var)
        return value.size <= 100_000 and not np.any(value < 0)
    return False


@_rule(Elemwise, scalar_tracks=(s.Exp,))
def exp_log(fgraph, node):
    """exp(log(x)) -> x where x >= 0 is known (else log(x) is NaN for negative x)."""
    match node.inputs:
        case [Variable(owner=Apply(op=Elemwise(s.Log()), inputs=[x]))] \
                if is_float(x) and nonnegative(x):
            return first(same_as(node.outputs[0], x))


# -- no-op shape and type nodes ------------------------------------------------------------------
@_rule(DimShuffle)
def dimshuffle_dimshuffle(fgraph, node):
    """DimShuffle(DimShuffle(x)) -> one DimShuffle (or x when they cancel)."""
    match node.inputs:
        case [Variable(owner=Apply(op=DimShuffle() as inner, inputs=[x]))]:
            order = tuple("x" if e == "x" else inner.new_order[e] for e in node.op.new_order)
            if order == tuple(range(x.ndim)):
                return first(same_as(node.outputs[0], x))
            return first(same_as(node.outputs[0], DimShuffle(x.ndim, order)(x)))


@_rule(DimShuffle)
def dimshuffle_identity(fgraph, node):
    """DimShuffle that keeps every axis in place -> x."""
    if node.op.new_order == tuple(range(node.op.input_ndim)):
        return first(same_as(node.outputs[0], node.inputs[0]))
    return None


@_rule(Reshape)
def reshape_reshape(fgraph, node):
    """reshape(reshape(x, s1), s2) -> reshape(x, s2)."""
    match node.inputs:
        case [Variable(owner=Apply(op=Reshape(), inputs=[x, _])), shp]:
            return first(same_as(node.outputs[0], Reshape(node.op.ndim)(x, shp)))


def _dim_is(x: Variable, axis: int, dim: Variable) -> bool:
    """True when 0-d `dim` is provably the length of axis `axis` of `x`."""
    static = x.type.shape[axis]
    if static is not None:
        v = scalar_constant(dim)
        return v is not None and v == static
    owner = dim.owner
    return owner is not None and isinstance(owner.op, ShapeI) and owner.op.i == axis \
        and owner.inputs[0] is x


def _shape_entries(shp: Variable) -> list | None:
    """The 0-d entries of a shape vector built by MakeVector or Shape, else None."""
    owner = shp.owner
    if owner is None:
        return None
    if isinstance(owner.op, MakeVector):
        return list(owner.inputs)
    return None


@_rule(Reshape)
def reshape_useless(fgraph, node):
    """reshape(x, shape(x)) or to x's own static shape -> x."""
    x, shp = node.inputs
    out = node.outputs[0]
    if x.ndim != out.ndim:
        return None
    if None not in x.type.shape and out.type.shape == x.type.shape:
        return first(same_as(out, x))
    owner = shp.owner
    if owner is not None and isinstance(owner.op, Shape) and owner.inputs[0] is x:
        return first(same_as(out, x))
    value = constant_value(shp)
    entries = _shape_entries(shp)
    if entries is None and value is not None:
        if all(s is not None and int(v) == s for v, s in zip(value, x.type.shape)):
            return first(same_as(out, x))
        return None
    if entries is not None and all(_dim_is(x, a, d) for a, d in enumerate(entries)):
        return first(same_as(out, x))
    return None


@_rule(Alloc)
def alloc_useless(fgraph, node):
    """broadcast_to(x, shape of x) -> x."""
    x, *dims = node.inputs
    if x.ndim == len(dims) and all(_dim_is(x, a, d) for a, d in enumerate(dims)):
        return first(same_as(node.outputs[0], x))
    return None


@_rule(Elemwise, scalar_tracks=(s.Cast,))
def cast_useless(fgraph, node):
    """cast(x, x.dtype) -> x."""
    (x,) = node.inputs
    if x.dtype == node.op.scalar_op.dtype:
        return first(same_as(node.outputs[0], x))
    return None


def _exact_cast(src: str, dst: str) -> bool:
    """Whether every value of `src` is exactly a value of `dst` (numpy's "safe" casting says
    int64 -> float64, which rounds above 2**53)."""
    if not np.can_cast(src, dst, "safe"):
        return False
    s, d = np.dtype(src), np.dtype(dst)
    if s.kind in "iu" and d.kind in "fc":
        return np.iinfo(s).bits - (s.kind == "i") <= np.finfo(d).nmant + 1
    return True


@_rule(Elemwise, scalar_tracks=(s.Cast,))
def cast_cast(fgraph, node):
    """cast(cast(x, d1), d2) -> cast(x, d2) when the first cast is exact."""
    match node.inputs:
        case [Variable(owner=Apply(op=Elemwise(s.Cast(dtype=d1)), inputs=[x]))] \
                if _exact_cast(x.dtype, d1):
            return first(same_as(node.outputs[0], m.cast(x, node.op.scalar_op.dtype)))


@_rule(Elemwise, scalar_tracks=(s.Identity,))
def identity_elemwise(fgraph, node):
    """identity(x) -> x."""
    return first(same_as(node.outputs[0], node.inputs[0]))


@_rule(Elemwise, scalar_tracks=(s.Switch,))
def where_same(fgraph, node):
    """where(c, a, a) -> a (when c broadcasts nothing)."""
    c, a, b = node.inputs
    if a is b and broadcasts_nothing(a, c):
        return first(same_as(node.outputs[0], a))
    return None


@_rule(Elemwise, scalar_tracks=(s.Switch,))
def where_constant_condition(fgraph, node):
    """where(True, a, b) -> a and where(False, a, b) -> b (when nothing else broadcasts)."""
    c, a, b = node.inputs
    v = scalar_constant(c)
    if v is None:
        return None
    keep, other = (a, b) if v else (b, a)
    if broadcasts_nothing(keep, c) and broadcasts_nothing(keep, other):
        return first(same_as(node.outputs[0], keep))
    return None


@_rule(Elemwise, scalar_tracks=(s.Second,))
def second_useless(fgraph, node):
    """second(x, y) -> y when y provably has the output's shape (statically, or x is y)."""
    x, y = node.inputs
    out = node.outputs[0]
    if y.dtype != out.dtype:
        return None
    if x is y or broadcasts_nothing(y, x):
        return first(same_as(out, y))
    return None


@_rule(SumToShape)
def sum_to_shape_static(fgraph, node):
    """SumToShape to the input's own, fully static shape -> the input."""
    g, _ = node.inputs
    target = node.op.static_shape
    if None not in target and target == g.type.shape:
        return first(same_as(node.outputs[0], g))
    return None


# -- reductions ---------------------------------------------------------------------------------
@_rule(Reduce)
def reduce_reduce(fgraph, node):
    """sum(sum(x, a1), a2) -> sum(x, a1 | a2) (same for prod, max, min, any, all): one pass
    over x instead of two (the inner result used only here)."""
    outer = node.op
    inner_var = node.inputs[0]
    owner = inner_var.owner
    if owner is None or type(owner.op) is not type(outer) or not single_client(fgraph, inner_var):
        return None
    inner = owner.op
    (x,) = owner.inputs
    kept = [a for a in range(x.ndim) if a not in inner.axis]
    mapped = set(outer.axis) if inner.keepdims else {kept[a] for a in outer.axis}
    combined = tuple(sorted(set(inner.axis) | mapped))
    dropped = set()  # axes of x missing from the result
    if not inner.keepdims:
        dropped |= set(inner.axis)
    if not outer.keepdims:
        dropped |= mapped
    if dropped == set(combined):
        new = type(outer)(combined, False)(x)
    elif not dropped:
        new = type(outer)(combined, True)(x)
    else:
        full = type(outer)(combined, True)(x)
        new = DimShuffle(x.ndim, [a for a in range(x.ndim) if a not in dropped])(full)
    return first(same_as(node.outputs[0], new) if new.dtype == node.outputs[0].dtype else None)


def _strip_expand(var: Variable):
    """(v, inserted axes) when `var` is a DimShuffle only inserting axes into v, else (var, ())."""
    owner = var.owner
    if owner is not None and isinstance(owner.op, DimShuffle) and not owner.op.dropped \
            and owner.op.kept == tuple(sorted(owner.op.kept)):
        return owner.inputs[0], owner.op.inserted
    return var, ()


def _is_shifted(x: Variable) -> bool:
    """True when x = y - (a maximum of y): the stable forms, which must not match again."""
    sop = elemwise_op(x)
    if not isinstance(sop, s.Sub):
        return False
    shift, _ = _strip_expand(x.owner.inputs[1])
    if isinstance(elemwise_op(shift), s.Switch):  # where(isinf(max), 0, max)
        shift, _ = _strip_expand(shift.owner.inputs[2])
    owner = shift.owner
    return owner is not None and isinstance(owner.op, Max)


def _stable_shift(x: Variable, axes: tuple) -> Variable:
    """The maximum of x over `axes` (kept as length 1), 0 where it is not finite."""
    top = Max(axes, True, empty_ok=True)(x)
    zero = const_like(0, x.dtype, x.ndim)
    return m.where(m.isinf(top), zero, top)


def _sum_of_exp(var: Variable):
    """(x, e, axes, keepdims) when var = sum(e, axes, keepdims) with e = exp(x), else None."""
    owner = var.owner
    if owner is None or type(owner.op) is not Sum:
        return None
    (e,) = owner.inputs
    match e:
        case Variable(owner=Apply(op=Elemwise(s.Exp()), inputs=[x])) if is_float(x):
            return x, e, owner.op.axis, owner.op.keepdims
    return None


@_rule(Elemwise, scalar_tracks=(s.TrueDiv,), tags=STABILIZE)
def softmax_stable(fgraph, node):
    """exp(x) / sum(exp(x), axis, keepdims) -> the same after subtracting max(x, axis)."""
    num, den = node.inputs
    den, inserted = _strip_expand(den)
    found = _sum_of_exp(den)
    if found is None:
        return None
    x, e, axes, keepdims = found
    if e is not num or _is_shifted(x) or x.dtype != node.outputs[0].dtype:
        return None
    if keepdims == bool(inserted) or (inserted and tuple(inserted) != axes):
        return None
    stable = m.exp(m.sub(x, _stable_shift(x, axes)))
    return first(same_as(node.outputs[0], m.true_divide(stable, Sum(axes, True)(stable))))


@_rule(Elemwise, scalar_tracks=(s.Log,), tags=STABILIZE)
def logsumexp_stable(fgraph, node):
    """log(sum(exp(x), axis)) -> max + log(sum(exp(x - max), axis)): no overflow."""
    found = _sum_of_exp(node.inputs[0])
    if found is None:
        return None
    x, _, axes, keepdims = found
    if _is_shifted(x) or x.dtype != node.outputs[0].dtype:
        return None
    shift = _stable_shift(x, axes)
    out = m.add(m.log(Sum(axes, True)(m.exp(m.sub(x, shift)))), shift)
    if not keepdims:
        out = DimShuffle(x.ndim, [a for a in range(x.ndim) if a not in axes])(out)
    return first(same_as(node.outputs[0], out))

