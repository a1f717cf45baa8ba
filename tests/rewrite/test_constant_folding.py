"""Constant folding: computed with perform, bounded in size, never on destroyers or errors."""

from __future__ import annotations

import numpy as np

import verglas as vg
from tests.rewrite.rules_util import check_preserved, op_names, rewritten
from verglas.graph import Constant, FunctionGraph
from verglas.ops.shape import Alloc, ARange
from verglas.rewrite import get_mode, rewrite_graph
from verglas.rewrite.constant_folding import MAX_EXPAND_SIZE, MAX_FOLD_SIZE

FOLD_ONLY = get_mode("fast_run").excluding("canonicalize", "shape", "specialize", "fusion",
                                           "inplace")


def test_folds_constant_subgraph_into_one_constant():
    x = vg.tensor("x", shape=(None,))
    c = vg.exp(vg.constant(np.arange(3.0))) * 2 + 1
    fg = check_preserved([x], x * c, [np.ones(3)], mode=FOLD_ONLY)
    (node,) = fg.apply_nodes  # only x * <constant> is left
    const = node.inputs[1]
    assert isinstance(const, Constant)
    np.testing.assert_allclose(const.data, np.exp(np.arange(3.0)) * 2 + 1)


def test_output_that_is_constant_becomes_a_constant():
    x = vg.tensor("x", shape=(None,))
    fg = rewritten([x], [x + 1, vg.sqrt(vg.constant(4.0))], FOLD_ONLY)
    assert isinstance(fg.outputs[1], Constant) and float(fg.outputs[1].data) == 2.0


def test_folding_keeps_dtype():
    x = vg.tensor("x", shape=(None,), dtype="int8")
    c = vg.constant(np.int8(100)) + vg.constant(np.int8(100))  # wraps as numpy does
    fg = check_preserved([x], x + c, [np.ones(4, "int8")], mode=FOLD_ONLY)
    consts = [i for n in fg.apply_nodes for i in n.inputs if isinstance(i, Constant)]
    assert [c.data.dtype for c in consts] == [np.int8]
    assert int(consts[0].data.reshape(())) == -56  # 200 wrapped in int8


def test_never_folds_a_small_fill_into_a_big_constant():
    x = vg.tensor("x", shape=(None,))
    big = vg.zeros((1000, 1000))  # Alloc of a scalar: far above both limits
    fg = rewritten([x], [vg.sum(big) + vg.sum(x)], FOLD_ONLY)
    assert any(isinstance(n.op, Alloc) for n in fg.apply_nodes)
    assert all(i.data.size <= MAX_EXPAND_SIZE for n in fg.apply_nodes for i in n.inputs
               if isinstance(i, Constant))


def test_expansion_limit_and_size_limit():
    x = vg.tensor("x", shape=(None,))
    small = vg.ones((4,))  # tiny expansion: folded
    medium = vg.arange(0, 1000)  # arange of scalars into 1000 elements: kept as an op
    fg = rewritten([x], [small, medium + x[0]], FOLD_ONLY)
    assert isinstance(fg.outputs[0], Constant)
    assert any(isinstance(n.op, ARange) for n in fg.apply_nodes)
    # above MAX_FOLD_SIZE even without expansion: a big constant stays an input of exp
    big = vg.constant(np.zeros(MAX_FOLD_SIZE + 1))
    fg = rewritten([x], [vg.exp(big)], FOLD_ONLY)
    assert op_names(fg)["exp"] == 1


def test_perform_error_leaves_the_node():
    x = vg.tensor("x", shape=(None,))
    # integers to negative integer powers fail in perform: the error belongs to run time
    neg = vg.power(vg.constant(np.int64(2)), vg.constant(np.int64(-1)))
    fg = FunctionGraph([x], [x + neg], clone=True)
    rewrite_graph(fg, FOLD_ONLY, strict=True)  # no error at compile time
    assert op_names(fg)["pow"] == 1


def test_destroy_map_ops_never_fold():
    from verglas.graph import Apply, Op
    from verglas.graph.types import TensorType

    class Destroyer(Op):
        destroy_map = {0: [0]}

        def make_node(self, x):
            return Apply(self, [x], [TensorType(x.dtype, x.type.shape)])

        def perform(self, node, inputs, outputs):
            outputs[0][0] = inputs[0] + 1

    x = vg.tensor("x", shape=(3,))
    fg = FunctionGraph([x], [x + Destroyer()(vg.constant(np.zeros(3)))], clone=True)
    rewrite_graph(fg, FOLD_ONLY, strict=True)
    assert any(isinstance(n.op, Destroyer) for n in fg.apply_nodes)


def test_folds_shapes_of_constants():
    x = vg.tensor("x", shape=(None,))
    c = vg.constant(np.ones((2, 5)))
    fg = rewritten([x], [x + c.shape[1]], FOLD_ONLY)
    (node,) = fg.apply_nodes
    assert isinstance(node.inputs[1], Constant)
    assert int(node.inputs[1].data.reshape(())) == 5
