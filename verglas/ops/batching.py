"""Batching: a computation written for one row, computed for every row of a new leading axis at
once (what JAX calls vmap). The loop rewrites that push work out of a Scan use it: a step's
`x_t @ u` becomes one `x @ u` over the whole sequence, a BLAS call instead of one per step.

Rules exist for the ops whose batched form is as fast as the row form: elementwise ops,
DimShuffle, reductions, SumToShape (a gradient's undoing of broadcasting) and MatMul (folding
the new axis into the matrix rows, one product); `batch` answers None where a graph holds
another op.
"""

from __future__ import annotations

from verglas.graph.traversal import toposort
from verglas.ops.basic import DimShuffle, make_vector, shape_i
from verglas.ops.elemwise import Elemwise, SumToShape
from verglas.ops.indexing import getitem
from verglas.ops.linalg import MatMul
from verglas.ops.math import mul
from verglas.ops.reduce import Reduce
from verglas.ops.shape import reshape

__all__ = ["batch", "batchable", "substitute"]


def batch(outputs, batched: dict, same: dict | None = None) -> list | None:
    """`outputs` for every row at once: `batched` maps inner variables to outer ones with a new
    leading axis (of the same length for all); `same` maps inner variables to the outer ones
    they are at every row; other variables the outputs read (constants) are the same for
    every row too. None when an op on the way has no rule, or an output does not depend on a
    batched variable."""
    memo = dict(batched)
    fixed = dict(same or {})
    for node in toposort(list(outputs), [*batched, *fixed]):
        ins = [memo.get(i) for i in node.inputs]
        if all(i is None for i in ins):
            continue  # the same for every row
        args = [b if b is not None else substitute([v], fixed)[0]
                for v, b in zip(node.inputs, ins)]
        new = _batch_node(node, ins, args)
        if new is None:
            return None
        memo.update(zip(node.outputs, new))
    result = [memo.get(o) for o in outputs]
    return None if any(r is None for r in result) else result


def substitute(outputs, replace: dict) -> list:
    """`outputs` rebuilt with each key of `replace` swapped for its value (by each op's
    make_node: types may get more specific, where graph_replace keeps them equal)."""
    if not replace:
        return list(outputs)
    memo = dict(replace)
    for node in toposort(list(outputs), list(replace)):
        ins = [memo.get(v, v) for v in node.inputs]
        if all(a is b for a, b in zip(ins, node.inputs)):
            continue
        new = node.op.make_node(*ins)
        memo.update(zip(node.outputs, new.outputs))
    return [memo.get(v, v) for v in outputs]


def batchable(node) -> bool:
    """Whether `batch` has a rule for `node`'s op."""
    op = node.op
    return (isinstance(op, (Elemwise, DimShuffle, MatMul, SumToShape))
            or (isinstance(op, Reduce) and _plain_reduce(op)))


def _plain_reduce(op) -> bool:
    return type(op).__props__ == ("axis", "keepdims")


def _batch_node(node, ins, args) -> list | None:
    """The outputs of `node` for every row: `ins[i]` the batched input i (None: the same for
    every row), `args[i]` input i outside the loop (batched or not)."""
    op = node.op
    if isinstance(op, Elemwise):
        ndim = node.outputs[0].ndim
        args = list(args)
        for k, (var, b) in enumerate(zip(node.inputs, ins)):
            # (right-aligned broadcasting spans the new axis for the others)
            if b is not None and var.ndim < ndim:  # its axes line up with the output's last
                args[k] = DimShuffle(b.ndim, (0, *["x"] * (ndim - var.ndim),
                                              *range(1, b.ndim)))(b)
        out = op(*args)
        return [out] if len(node.outputs) == 1 else list(out)
    if isinstance(op, DimShuffle):
        order = (0, *("x" if d == "x" else d + 1 for d in op.new_order))
        return [DimShuffle(op.input_ndim + 1, order)(ins[0])]
    if isinstance(op, Reduce) and _plain_reduce(op):
        return [type(op)(tuple(a + 1 for a in op.axis), op.keepdims)(ins[0])]
    if isinstance(op, SumToShape):
        if ins[1] is not None:  # (a target shape that varies with the rows)
            return None
        g, shp = args
        target = make_vector([shape_i(g, 0), *(getitem(shp, a) for a in range(g.ndim - 1))])
        return [SumToShape((None, *op.static_shape))(g, target)]
    if isinstance(op, MatMul):
        out = _batched_matmul(node, *ins, *args)
        return None if out is None else [out]
    return None


def _batched_matmul(node, a_b, b_b, a, b):
    """a @ b for every row, as one matrix product where one side is the same for all rows."""
    if node.inputs[0].ndim != 2 or node.inputs[1].ndim != 2:
        return None
    if b_b is None:  # rows of a: (T, M, K) -> (T*M, K) @ (K, N) -> (T, M, N)
        if a_b.type.shape[1] == 1:  # (a row per step: no reshape, only views)
            out = MatMul()(DimShuffle(3, (0, 2))(a_b), b)
            return DimShuffle(2, (0, "x", 1))(out)
        t, m, k = (shape_i(a_b, i) for i in range(3))
        out = MatMul()(reshape(a_b, (mul(t, m), k)), b)
        return reshape(out, (t, m, shape_i(b, 1)))
    if a_b is None:  # a @ each b: (M, K) @ (K, T*N) from b's rows side by side
        if b_b.type.shape[2] == 1:  # (a column per step: a @ B.T, views only)
            out = MatMul()(a, DimShuffle(3, (1, 0))(b_b))  # (M, T)
            return DimShuffle(2, (1, 0, "x"))(out)
        t, k, n = (shape_i(b_b, i) for i in range(3))
        side = reshape(DimShuffle(3, (1, 0, 2))(b_b), (k, mul(t, n)))
        out = MatMul()(a, side)
        return DimShuffle(3, (1, 0, 2))(reshape(out, (shape_i(a, 0), t, n)))
    return MatMul()(a_b, b_b)  # both vary: a batched product
