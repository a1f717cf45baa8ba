"""The row shapes of a loop's collected (nit-sot) outputs, from the lengths of its inputs.

A loop that runs no step has no row to read a collected output's shape from, yet the program
it came from has one: the gradient of a sequence has that sequence's shape, at any length.
Where the body's shape inference gives a row's lengths from the outer inputs' lengths alone,
each is kept here as a small integer expression, which the reference loop evaluates and the
CPU backend writes as code; a length that reads values stays unknown (None): an empty axis.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from verglas.graph.basic import Constant
from verglas.graph.types import TensorType
from verglas.ops.basic import ShapeI
from verglas.ops.elemwise import Elemwise
from verglas.ops.op_from_graph import infer_shapes, rebuild_graph
from verglas.ops.scalar import Cast, Identity

__all__ = ["Length", "Term", "row_shapes", "evaluate"]


class Length(NamedTuple):
    """Axis `axis` of the outer input `input` (counted after n_steps)."""

    input: int
    axis: int


class Term(NamedTuple):
    """A scalar op (with an `impl_expr`, or a cast) applied to integer terms."""

    sop: object
    args: tuple


def row_shapes(op) -> tuple[tuple, ...]:
    """Per nit-sot of Scan `op`, per axis of its rows: an int, a Length or Term expression,
    or None (the length depends on values). Derived once per op."""
    cached = op.__dict__.get("_row_shapes")
    if cached is None:
        cached = op.__dict__["_row_shapes"] = _derive(op)
    return cached


def _derive(op) -> tuple[tuple, ...]:
    lay = op.layout
    placeholders = [t.make_variable() for t in op.inner_input_types]
    known, leaves = {}, {}
    for j, group in enumerate(op.groups):
        lead = j < lay.n_seqs + lay.n_mit_sot  # (a sequence's or mit-sot's rows)
        for g in group:
            dims = []
            for d in range(placeholders[g].ndim):
                leaf = TensorType("int64", ()).make_variable()
                leaves[leaf] = Length(j, d + lead)
                dims.append(leaf)
            known[placeholders[g]] = tuple(dims)
    outs = rebuild_graph(op.fgraph, placeholders)[lay.n_states:lay.n_outputs]
    return tuple(tuple(_term(d, known, leaves, 0) for d in shape)
                 for shape in infer_shapes(outs, known))


def _term(v, known, leaves, depth: int):
    """`v`, a 0-d integer of a shape graph, as an expression of Lengths (None if it reads a
    value, or an op this does not follow)."""
    if depth > 32:
        return None
    if v in leaves:
        return leaves[v]
    if isinstance(v, Constant):
        return int(v.data) if v.data.ndim == 0 else None
    node = v.owner
    if node is None or v.ndim != 0 or np.dtype(v.dtype).kind not in "iub":
        return None
    if isinstance(node.op, ShapeI):
        shape = infer_shapes([node.inputs[0]], known)[0]
        return _term(shape[node.op.i], known, leaves, depth + 1)
    if not isinstance(node.op, Elemwise):
        return None
    sop = node.op.scalar_op
    if not (isinstance(sop, (Cast, Identity)) or getattr(sop, "impl_expr", None)):
        return None
    args = tuple(_term(x, known, leaves, depth + 1) for x in node.inputs)
    if any(a is None for a in args):
        return None
    if isinstance(sop, (Cast, Identity)):
        return args[0]
    return Term(sop, args)


def evaluate(expr, length) -> int:
    """The value of `expr`, `length(input, axis)` giving each Length."""
    if isinstance(expr, int):
        return expr
    if isinstance(expr, Length):
        return int(length(expr.input, expr.axis))
    args = [np.int64(evaluate(a, length)) for a in expr.args]
    return int(expr.sop.nfunc(*args))
