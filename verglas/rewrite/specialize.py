"""Specialization: cheaper or more accurate special cases of what canonicalization left.

exp(x) - 1 -> expm1(x) and log(1 + x) -> log1p(x) (more accurate near 0, one op), x*x ->
sqr(x), x * -1 -> -x, 1/x -> reciprocal(x), reductions over no axis or over length-1 axes
become casts / DimShuffles (no loop at all).

expm1 and log1p are more accurate than what they replace; the one visible difference besides
rounding is the sign of a zero result (expm1(-0.0) is -0.0 where exp(-0.0) - 1 is +0.0).
"""

from __future__ import annotations

from verglas.graph import Variable
from verglas.ops import math as m
from verglas.ops import scalar as s
from verglas.ops.basic import DimShuffle
from verglas.ops.elemwise import Elemwise
from verglas.ops.reduce import All, Any, Reduce, Sum
from verglas.rewrite.canonicalize import never_negative_zero
from verglas.rewrite.registry import phase_rule
from verglas.rewrite.utils import (broadcasts_nothing, const_like, elemwise_op, first, is_constant,
                                   is_float, same_as, scalar_constant)

__all__ = ["expm1_specialize", "log1p_specialize", "mul_self_to_sqr", "mul_minus_one_to_neg",
           "one_over_to_reciprocal", "reduce_no_axes", "reduce_length_one_axes"]

TAGS = ("fast_run",)


_rule = phase_rule("specialize", TAGS)


def _plus_constant(node, value) -> Variable | None:
    """x when `node` computes x + c (either order) with c == value everywhere (or x - c with
    c == -value), c broadcasting nothing and x of the output dtype; else None."""
    sop = node.op.scalar_op
    a, b = node.inputs
    out = node.outputs[0]
    if isinstance(sop, s.Add):
        pairs = ((a, b, value), (b, a, value))
    elif isinstance(sop, s.Sub):
        pairs = ((a, b, -value),)
    else:
        return None
    for x, c, want in pairs:
        v = scalar_constant(c)
        if v is not None and v == want and not is_constant(x) and x.dtype == out.dtype \
                and broadcasts_nothing(x, c):
            return x
    return None


@_rule(Elemwise, scalar_tracks=(s.Add, s.Sub))
def expm1_specialize(fgraph, node):
    """exp(x) - 1 -> expm1(x) (float x)."""
    e = _plus_constant(node, -1)
    if e is None or not isinstance(elemwise_op(e), s.Exp):
        return None
    (x,) = e.owner.inputs
    if not is_float(x) or x.dtype != e.dtype:
        return None
    return first(same_as(node.outputs[0], m.expm1(x)))


@_rule(Elemwise, scalar_tracks=(s.Log,))
def log1p_specialize(fgraph, node):
    """log(1 + x) -> log1p(x) (float x)."""
    (arg,) = node.inputs
    if not isinstance(elemwise_op(arg), (s.Add, s.Sub)):
        return None
    x = _plus_constant(arg.owner, 1)
    if x is None or not is_float(x):
        return None
    return first(same_as(node.outputs[0], m.log1p(x)))


@_rule(Elemwise, scalar_tracks=(s.Mul,))
def mul_self_to_sqr(fgraph, node):
    """x * x -> sqr(x)."""
    a, b = node.inputs
    if a is b and a.dtype != "bool":
        return first(same_as(node.outputs[0], m.sqr(a)))
    return None


@_rule(Elemwise, scalar_tracks=(s.Mul,))
def mul_minus_one_to_neg(fgraph, node):
    """x * -1 -> -x (signed x of the output dtype)."""
    x, c = node.inputs
    v = scalar_constant(c)
    if v is None or v != -1 or is_constant(x) or x.dtype != node.outputs[0].dtype \
            or x.dtype == "bool" or x.dtype.startswith("u") or not broadcasts_nothing(x, c):
        return None
    return first(same_as(node.outputs[0], m.neg(x)))


@_rule(Elemwise, scalar_tracks=(s.TrueDiv,))
def one_over_to_reciprocal(fgraph, node):
    """1 / x -> reciprocal(x) (float x)."""
    c, x = node.inputs
    v = scalar_constant(c)
    if v is None or v != 1 or not is_float(x) or x.dtype != node.outputs[0].dtype \
            or not broadcasts_nothing(x, c):
        return None
    return first(same_as(node.outputs[0], m.reciprocal(x)))


def _as_reduced(x: Variable, op: Reduce) -> Variable:
    """x as the result of reducing nothing with `op`: Any/All test nonzero; a float or
    complex Sum adds its identity, as numpy's does (np.sum([-0.0], axis=0) is +0.0; fuzz
    seed 34707) unless x cannot be -0.0; the others cast."""
    if isinstance(op, (Any, All)):
        return m.cast(x, "bool")
    if isinstance(op, Sum) and x.dtype.startswith(("float", "complex")) \
            and not never_negative_zero(x):
        return m.add(x, const_like(0, x.dtype, x.ndim))
    return x


@_rule(Reduce)
def reduce_no_axes(fgraph, node):
    """sum(x, axis=()) -> x (cast to the reduction's dtype)."""
    if node.op.axis:
        return None
    return first(same_as(node.outputs[0], _as_reduced(node.inputs[0], node.op)))


@_rule(Reduce)
def reduce_length_one_axes(fgraph, node):
    """A reduction over axes of static length 1 does not reduce them: drop them instead."""
    op = node.op
    (x,) = node.inputs
    ones = tuple(a for a in op.axis if x.type.shape[a] == 1)
    if not ones:
        return None
    rest = tuple(a for a in op.axis if a not in ones)
    if op.keepdims:
        new = op.with_axes(rest, True)(x) if rest else _as_reduced(x, op)
    else:
        kept = [a for a in range(x.ndim) if a not in ones]
        squeezed = DimShuffle(x.ndim, kept)(x)
        renumbered = tuple(kept.index(a) for a in rest)
        new = op.with_axes(renumbered, False)(squeezed) if rest else _as_reduced(squeezed, op)
    return first(same_as(node.outputs[0], new))
