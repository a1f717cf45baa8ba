"""Shape rewrites: shapes from input shapes, provably useless shape nodes removed."""

from __future__ import annotations

import numpy as np

import verglas as vg
from tests.rewrite.rules_util import check_preserved, op_names
from verglas.graph import Constant
from verglas.ops.basic import ShapeI
from verglas.ops.elemwise import sum_to_shape
from verglas.ops.math import second


def test_shape_subscript_becomes_shape_i_of_the_input():
    x = vg.tensor("x", shape=(None, 3))
    y = vg.exp(x) * 2
    fg = check_preserved([x], [y.shape[0] + 1, y.shape[1] + 1], [np.ones((4, 3))])
    nodes = [n for n in fg.apply_nodes if isinstance(n.op, ShapeI)]
    assert len(nodes) == 1 and nodes[0].inputs[0] in fg.inputs  # of x, not of y
    assert "exp" not in op_names(fg)  # y is not computed for its shape
    assert isinstance(fg.outputs[1], Constant) and int(fg.outputs[1].data) == 4


def test_shape_i_through_reductions_dimshuffle_and_matmul():
    a = vg.tensor("a", shape=(None, None))
    b = vg.tensor("b", shape=(None, None))
    y = vg.sum(vg.transpose(vg.tanh(a @ b)), axis=0)  # shape (rows of a,)
    fg = check_preserved([a, b], [y.shape[0] * 1], [np.ones((2, 5)), np.ones((5, 3))])
    names = op_names(fg)
    assert "MatMul" not in names and "tanh" not in names and names["ShapeI"] == 1


def test_shape_vector_becomes_make_vector_or_constant():
    x = vg.tensor("x", shape=(None, 3))
    fg = check_preserved([x], [x.shape + 0], [np.ones((2, 3))])
    names = op_names(fg)
    assert "Shape" not in names and names["MakeVector"] == 1
    z = vg.tensor("z", shape=(2, 3))
    fg = check_preserved([z], [z.shape], [np.ones((2, 3))])
    assert isinstance(fg.outputs[0], Constant)


def test_sum_to_shape_removed_when_shapes_provably_equal():
    x = vg.tensor("x", shape=(None, None))
    g = vg.tanh(x) * 3
    fg = check_preserved([x], [sum_to_shape(g, x.shape) + 1], [np.ones((2, 3))])
    assert "SumToShape" not in op_names(fg)


def test_sum_to_shape_kept_when_it_may_sum():
    x = vg.tensor("x", shape=(None, None))
    b = vg.tensor("b", shape=(None,))
    g = x + b
    data = [np.ones((2, 3)), np.ones(1)]  # b broadcasts at run time: the sum is needed
    fg = check_preserved([x, b], [sum_to_shape(g, vg.expand_dims(b, 0).shape)], data)
    assert "SumToShape" in op_names(fg)


def test_sum_to_shape_of_a_static_one_becomes_a_sum():
    x = vg.tensor("x", shape=(None, None))
    g = vg.exp(x)
    target = vg.sum(x, axis=0, keepdims=True)  # shape (1, n)
    fg = check_preserved([x], [sum_to_shape(g, target.shape, (1, None))], [np.ones((2, 3))])
    names = op_names(fg)
    assert "SumToShape" not in names and names["Sum"] == 1


def test_gradient_of_elementwise_has_no_sum_to_shape():
    x = vg.tensor("x", shape=(None, None))
    w = vg.tensor("w", shape=(None, None))
    cost = vg.sum(vg.tanh(x @ w) * vg.exp(x @ w))
    gw, gx = vg.grad(cost, [w, x])
    fg = check_preserved([x, w], [gw, gx], [np.ones((2, 3)), np.ones((3, 3))], rtol=1e-9)
    assert "SumToShape" not in op_names(fg)


def test_alloc_reshape_second_where_to_own_shape():
    x = vg.tensor("x", shape=(None, None))
    y = vg.exp(x)
    outs = [vg.broadcast_to(y, x.shape) + 1, vg.reshape(y, x.shape) + 2,
            second(x, y) + 3, vg.where(x > 0, y, y) + 4]
    fg = check_preserved([x], outs, [np.arange(6.0).reshape(2, 3)])
    names = op_names(fg)
    for gone in ("Alloc", "Reshape", "second", "switch"):
        assert gone not in names, names


def test_second_that_broadcasts_is_kept():
    x = vg.tensor("x", shape=(None, None))
    y = vg.tensor("y", shape=(None, None))
    fg = check_preserved([x, y], [second(x, y)], [np.ones((2, 3)), np.ones((1, 3))])
    assert "second" in op_names(fg)
