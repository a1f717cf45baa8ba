"""Small helpers the rule modules share: reading constants, typing replacements, matching."""

from __future__ import annotations

import numpy as np

from verglas.graph import Constant, OUTPUT, Variable
from verglas.ops.basic import DimShuffle, constant
from verglas.ops.elemwise import Elemwise
from verglas.ops.math import cast

__all__ = ["constant_value", "scalar_constant", "is_constant", "same_as", "const_like",
           "owner_op", "elemwise_op", "single_client", "is_float", "is_int_or_bool",
           "broadcasts_nothing", "first", "restrict_to_read_outputs"]

_SCAN_LIMIT = 100_000  # larger constants are not inspected element by element


def constant_value(var: Variable) -> np.ndarray | None:
    """The value of `var` when it is a Constant or a DimShuffle of one, else None."""
    if isinstance(var, Constant):
        return var.data
    owner = var.owner
    if owner is not None and type(owner.op) is DimShuffle and isinstance(owner.inputs[0],
                                                                          Constant):
        storage = [None]
        owner.op.perform(owner, [owner.inputs[0].data], [storage])
        return storage[0]
    return None


def is_constant(var: Variable) -> bool:
    """True for a Constant or a DimShuffle of one (what a weak Python scalar becomes)."""
    owner = var.owner
    return isinstance(var, Constant) or (
        owner is not None and type(owner.op) is DimShuffle and isinstance(owner.inputs[0],
                                                                          Constant))


def scalar_constant(var: Variable):
    """The one value every element of constant `var` holds (a numpy scalar), else None."""
    data = constant_value(var)
    if data is None or data.size == 0 or data.size > _SCAN_LIMIT:
        return None
    first = data.flat[0]
    if data.size > 1:
        if first != first:  # NaN: equal to nothing, compare bit patterns
            return None
        if not np.all(data == first):
            return None
    return first


def const_like(value, dtype: str, ndim: int):
    """A constant of `dtype` holding `value` (scalar or array) with `ndim` axes (1s prepended)."""
    arr = np.asarray(value).astype(dtype)
    if arr.ndim < ndim:
        arr = arr.reshape((1,) * (ndim - arr.ndim) + arr.shape)
    return constant(arr, dtype)


def same_as(out: Variable, new: Variable) -> Variable | None:
    """`new` as a replacement for `out`: cast to its dtype; None when its static shape says
    it could differ (it would have been broadcast) or it is of another ndim."""
    if new.ndim != out.ndim:
        return None
    if new.dtype != out.dtype:
        new = cast(new, out.dtype)
    return new if out.type.is_super(new.type) else None


def broadcasts_nothing(x: Variable, other: Variable) -> bool:
    """True when `other` (of x's ndim) cannot make an elementwise result bigger than `x`."""
    if other.ndim > x.ndim:
        return False
    xs = x.type.shape[x.ndim - other.ndim:]
    return all(o == 1 or (o is not None and o == s) for o, s in zip(other.type.shape, xs))


def owner_op(var: Variable):
    """The op computing `var` (None for roots)."""
    return None if var.owner is None else var.owner.op


def elemwise_op(var: Variable):
    """The scalar op of the Elemwise computing `var`, else None."""
    owner = var.owner
    if owner is not None and type(owner.op) is Elemwise:
        return owner.op.scalar_op
    return None


def single_client(fgraph, var: Variable) -> bool:
    """True when `var` has exactly one use in `fgraph` (and is not a graph output)."""
    clients = fgraph.clients.get(var)
    return clients is not None and len(clients) == 1 and clients[0][0] != OUTPUT


def is_float(var: Variable) -> bool:
    return np.dtype(var.dtype).kind in "fc"


def is_int_or_bool(var: Variable) -> bool:
    return np.dtype(var.dtype).kind in "biu"



def first(*candidates) -> list | None:
    """[the first candidate replacement that is not None], or None: a rule's return value."""
    for c in candidates:
        if c is not None:
            return [c]
    return None


def restrict_to_read_outputs(fgraph, node) -> list | None:
    """Replacements for the outputs of an inner-graph node (OpFromGraph, Scan) from its op
    restricted to the outputs something reads (`op.restrict`): the new node's outputs where it
    has them, the old ones (read by nobody) elsewhere; None when nothing can go."""
    used = [k for k, out in enumerate(node.outputs) if fgraph.clients[out]]
    restricted = node.op.restrict(used) if used else None
    if restricted is None:
        return None
    new_op, in_idx, out_idx = restricted
    new = new_op.make_node(*[node.inputs[i] for i in in_idx])
    result = list(node.outputs)
    for k, var in zip(out_idx, new.outputs):
        result[k] = var
    return result
