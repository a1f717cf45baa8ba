"""Arithmetic on lengths: integer expressions built from array shapes, simplified by bounds.

Slicing, padding and gradients compute lengths with guards that matter only for negative or
out-of-range values: `x[:n]` gives `max((min(n', len) - 0) // 1, 0)` rows, `x[1:]` subtracts
`min(len + 1, 1)`. A length is never negative, so most guards are no-ops; dropping them makes
two buffers that hold the same number of elements carry the same interned size, which the
memory plan needs to let one reuse the other's storage.

`lower_bound` derives a bound from how a 0-d integer is computed: shapes are >= 0 (or their
static size), constants are themselves, and add, mul, maximum, minimum, floor division by a
positive constant and casts between integers propagate bounds. Sums and products of lengths
are assumed not to overflow int64 (an array that large cannot exist), as XLA and PyTensor
assume. The rules here fire on 0-d integer nodes only: shape arithmetic, never array data.
"""

from __future__ import annotations

import numpy as np

from verglas.graph import Variable
from verglas.ops import scalar as s
from verglas.ops.basic import ShapeI
from verglas.ops.elemwise import Elemwise
from verglas.rewrite.registry import phase_rule
from verglas.rewrite.utils import (broadcasts_nothing, const_like, elemwise_op, first, same_as,
                                   scalar_constant)

__all__ = ["lower_bound", "max_of_bounded", "min_of_bounded", "compare_bounded",
           "floor_div_one"]

_rule = phase_rule("canonicalize", ("fast_run", "fast_compile"))
_DEPTH = 12  # lengths are short expressions; deeper ones are not looked into


def _is_int_scalar(var: Variable) -> bool:
    return var.ndim == 0 and np.dtype(var.dtype).kind in "iu"


def lower_bound(var: Variable, depth: int = 0) -> int | None:
    """A value `var` (a 0-d integer) is known never to be below, or None."""
    if not _is_int_scalar(var) or depth > _DEPTH:
        return None
    value = scalar_constant(var)
    if value is not None:
        return int(value)
    owner = var.owner
    if owner is None:
        return 0 if np.dtype(var.dtype).kind == "u" else None
    if isinstance(owner.op, ShapeI):
        static = owner.inputs[0].type.shape[owner.op.i]
        return 0 if static is None else int(static)
    sop = elemwise_op(var)
    if sop is None:
        return None
    bounds = [lower_bound(i, depth + 1) for i in owner.inputs]
    match sop:
        case s.Add():
            return None if None in bounds else sum(bounds)
        case s.Mul():
            return bounds[0] * bounds[1] if None not in bounds and min(bounds) >= 0 else None
        case s.Maximum():
            known = [b for b in bounds if b is not None]
            return max(known) if known else None
        case s.Minimum():
            return None if None in bounds else min(bounds)
        case s.FloorDiv():
            d = scalar_constant(owner.inputs[1])
            return bounds[0] // int(d) if bounds[0] is not None and d is not None and d > 0 \
                else None
        case s.Cast():
            return bounds[0] if _is_int_scalar(owner.inputs[0]) else None
        case s.Switch():
            return None if None in bounds[1:] else min(bounds[1:])
    return None


@_rule(Elemwise, scalar_tracks=(s.Maximum,))
def max_of_bounded(fgraph, node):
    """maximum(a, c) -> a where a >= c is known (c a constant): `max(len, 0)` -> `len`."""
    out = node.outputs[0]
    if not _is_int_scalar(out):
        return None
    for a, c in (node.inputs, node.inputs[::-1]):
        v, low = scalar_constant(c), lower_bound(a)
        if v is not None and low is not None and low >= v and a.dtype == out.dtype:
            return first(same_as(out, a))
    return None


@_rule(Elemwise, scalar_tracks=(s.Minimum,))
def min_of_bounded(fgraph, node):
    """minimum(a, c) -> c where a >= c is known (c a constant); minimum(a, a + d) -> a where
    d >= 0 is known; minimum(a, a) -> a."""
    out = node.outputs[0]
    if not _is_int_scalar(out):
        return None
    a, b = node.inputs
    if a is b and a.dtype == out.dtype:
        return first(same_as(out, a))
    for x, c in ((a, b), (b, a)):
        v, low = scalar_constant(c), lower_bound(x)
        if v is not None and low is not None and low >= v:
            return first(same_as(out, const_like(v, out.dtype, 0)))
        if x.dtype == out.dtype and _at_least(c, x):
            return first(same_as(out, x))
    return None


def _at_least(b: Variable, a: Variable) -> bool:
    """Whether b = a + d with d >= 0 known: `min(len, len + 1)` is `len`."""
    if elemwise_op(b).__class__ is not s.Add:
        return False
    p, q = b.owner.inputs
    for same, d in ((p, q), (q, p)):
        low = lower_bound(d)
        if same is a and low is not None and low >= 0:
            return True
    return False


@_rule(Elemwise, scalar_tracks=(s.Lt, s.Ge, s.Gt, s.Le))
def compare_bounded(fgraph, node):
    """a < c -> False and a >= c -> True where a >= c is known (c a constant), and the
    mirrored forms c > a, c <= a: `switch(len < 0, ...)` loses its dead branch."""
    out = node.outputs[0]
    a, c = node.inputs
    sop = node.op.scalar_op
    if isinstance(sop, (s.Gt, s.Le)):  # c > a is a < c, c <= a is a >= c
        a, c = c, a
        sop = s.Lt() if isinstance(sop, s.Gt) else s.Ge()
    if out.ndim != 0 or not _is_int_scalar(a):
        return None
    v, low = scalar_constant(c), lower_bound(a)
    if v is None or low is None or low < v or not np.isfinite(float(v)):
        return None
    return first(same_as(out, const_like(isinstance(sop, s.Ge), out.dtype, 0)))


@_rule(Elemwise, scalar_tracks=(s.FloorDiv,))
def floor_div_one(fgraph, node):
    """a // 1 -> a for integers (a slice's step of one)."""
    out = node.outputs[0]
    a, d = node.inputs
    if np.dtype(out.dtype).kind not in "iu" or a.dtype != out.dtype \
            or not broadcasts_nothing(a, d):
        return None
    v = scalar_constant(d)
    return first(same_as(out, a)) if v is not None and v == 1 else None
