"""Matrix products: MatMul (batched, numpy broadcasting of batch dims), matmul and dot."""

from __future__ import annotations

import numpy as np

from verglas.graph.basic import Apply, Variable
from verglas.graph.op import Op
from verglas.graph.types import TensorType
from verglas.ops.basic import as_tensor, constant, dimshuffle, expand_dims, shape_i, shape_str
from verglas.ops.elemwise import broadcast_static_shape, sum_to
from verglas.ops.indexing import _broadcast_dims
from verglas.ops.math import mul
from verglas.ops.shape import reshape

__all__ = ["MatMul", "matmul", "dot", "matmul_dtype"]


def matmul_dtype(a: str, b: str) -> str:
    """numpy's result dtype of a matrix product (bool @ bool stays bool)."""
    return np.matmul(np.zeros((1, 1), dtype=a), np.zeros((1, 1), dtype=b)).dtype.name


def _check_contracted(name, a, b, ka, kb):
    if ka is not None and kb is not None and ka != kb:
        raise ValueError(f"{name}: shapes {shape_str(a.type.shape)} and "
                         f"{shape_str(b.type.shape)} are not aligned: contracted dimensions "
                         f"{ka} != {kb}")


def _swap_last(x: Variable) -> Variable:
    order = list(range(x.ndim))
    order[-2], order[-1] = order[-1], order[-2]
    return dimshuffle(x, order)


class MatMul(Op):
    """a @ b for a, b of ndim >= 2: matrix products over broadcast batch dimensions."""

    def make_node(self, a, b):
        a, b = as_tensor(a), as_tensor(b)
        if a.ndim < 2 or b.ndim < 2:
            raise ValueError(f"MatMul: inputs need ndim >= 2, got shapes "
                             f"{shape_str(a.type.shape)} and {shape_str(b.type.shape)} (use "
                             f"matmul for vectors)")
        _check_contracted("MatMul", a, b, a.type.shape[-1], b.type.shape[-2])
        try:
            batch = broadcast_static_shape([a.type.shape[:-2], b.type.shape[:-2]], "MatMul")
        except ValueError:
            raise ValueError(f"MatMul: batch dimensions of shapes {shape_str(a.type.shape)} "
                             f"and {shape_str(b.type.shape)} cannot be broadcast") from None
        shape = batch + (a.type.shape[-2], b.type.shape[-1])
        return Apply(self, [a, b], [TensorType(matmul_dtype(a.dtype, b.dtype), shape)])

    def perform(self, node, inputs, outputs):
        a, b = inputs
        try:
            out = np.matmul(a, b)
        except ValueError:
            raise ValueError(f"MatMul: shapes {a.shape} and {b.shape} are not aligned or their "
                             f"batch dimensions do not broadcast") from None
        outputs[0][0] = np.asarray(out, dtype=node.outputs[0].dtype)

    def infer_shape(self, fgraph, node, input_shapes):
        sa, sb = input_shapes
        dims = _broadcast_dims(list(sa[:-2]), list(sb[:-2])) + [sa[-2], sb[-1]]
        static = node.outputs[0].type.shape
        return [tuple(d if s is None else constant(s, "int64") for d, s in zip(dims, static))]

    def L_op(self, inputs, outputs, output_grads):
        a, b = inputs
        (g,) = output_grads
        grads = []
        grad_b = (lambda: _rows_product(a, g)) if a.ndim > 2 and b.ndim == 2 else \
            (lambda: self(_swap_last(a), g))
        for x, gx in ((a, lambda: self(g, _swap_last(b))), (b, grad_b)):
            if np.dtype(x.dtype).kind not in "fc":
                grads.append(None)
                continue
            # batch dimensions that were broadcast are summed back
            grads.append(sum_to(gx(), x).astype(x.dtype))
        return grads


def _rows_product(a: Variable, g: Variable) -> Variable:
    """a^T g over all rows of (..., M, K) `a` and (..., M, N) `g`: the gradient of a 2-d
    right operand, one (K, rows) @ (rows, N) product rather than a batch of them summed."""
    rows = shape_i(a, 0)
    for axis in range(1, a.ndim - 1):  # (not -1: a reshape cannot infer it when K == 0)
        rows = mul(rows, shape_i(a, axis))
    k, n = shape_i(a, a.ndim - 1), shape_i(g, g.ndim - 1)
    return MatMul()(_swap_last(reshape(a, (rows, k))), reshape(g, (rows, n)))


def matmul(a, b) -> Variable:
    """Matrix product with numpy's rules: 1-d operands are promoted and their axis removed."""
    a, b = as_tensor(a), as_tensor(b)
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(f"matmul: operands must be at least 1-d, got shapes "
                         f"{shape_str(a.type.shape)} and {shape_str(b.type.shape)} (use *)")
    kb = b.type.shape[0] if b.ndim == 1 else b.type.shape[-2]
    _check_contracted("matmul", a, b, a.type.shape[-1], kb)
    a2 = expand_dims(a, 0) if a.ndim == 1 else a
    b2 = expand_dims(b, 1) if b.ndim == 1 else b
    out = MatMul()(a2, b2)
    drop = ([out.ndim - 2] if a.ndim == 1 else []) + ([out.ndim - 1] if b.ndim == 1 else [])
    if drop:
        out = dimshuffle(out, [d for d in range(out.ndim) if d not in drop])
    return out


def dot(a, b) -> Variable:
    """numpy.dot: a product with scalars, matmul for 1-d/2-d, a sum over the last axis of `a`
    and the second-to-last of `b` for n-d."""
    a, b = as_tensor(a), as_tensor(b)
    if a.ndim == 0 or b.ndim == 0:
        return mul(a, b)
    if b.ndim <= 2:  # matmul broadcasting a 2-d b over a's leading axes is numpy.dot here
        return matmul(a, b)
    _check_contracted("dot", a, b, a.type.shape[-1], b.type.shape[-2])
    # b (j..., k, m) -> (k, j... * m); then a @ that, and unflatten the trailing axes
    order = [b.ndim - 2] + [d for d in range(b.ndim) if d != b.ndim - 2]
    rest = shape_i(b, order[1])  # the other lengths' product (not -1: k may be 0)
    for d in order[2:]:
        rest = rest * shape_i(b, d)
    b2 = reshape(dimshuffle(b, order), (shape_i(b, b.ndim - 2), rest))
    out = matmul(a, b2)
    dims = [shape_i(a, d) for d in range(a.ndim - 1)] + \
        [shape_i(b, d) for d in range(b.ndim) if d != b.ndim - 2]
    return reshape(out, tuple(dims))
