"""Inplace: the destroy handler's rules, the Elemwise inplace rewrite, and running the result."""

from __future__ import annotations

import time

import numpy as np
import pytest

import verglas as vg
from verglas.function import Function, _optimize
from verglas.graph import Apply, FunctionGraph, InconsistencyError, freeze
from verglas.graph.destroy import DestroyHandler
from verglas.ops.elemwise import Elemwise
from verglas.ops.scalar import Cos, Exp, Sin
from verglas.graph.reference import ReferenceRunner
from verglas.rewrite import get_mode, rewrite_graph
from verglas.rewrite.inplace import guard_inplace

NO_FUSION = get_mode("fast_run").excluding("fusion")  # keeps nodes apart: inplace has work


def optimized(inputs, outputs, mode=NO_FUSION):
    fg = FunctionGraph(inputs, outputs, clone=True)
    rewrite_graph(fg, mode)
    return fg.freeze(dedup_nodes=not any(n.op.destroy_map for n in fg.apply_nodes))


def destroyers(graph):
    return [n for n in graph.toposort() if n.op.destroy_map]


def check_same_results(inputs, outputs, values, mode=NO_FUSION):
    before = ReferenceRunner(freeze(inputs, outputs))(values)
    graph = optimized(inputs, outputs, mode)
    copies = [v.copy() for v in values]
    after = ReferenceRunner(graph)(copies)
    for c, v in zip(copies, values):
        np.testing.assert_array_equal(c, v)  # inputs are never modified
    for b, a in zip(before, after):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    return graph


def inplace_node(op_class, var, i=0):
    """An inplace Elemwise of a fresh scalar op of `op_class` on `var`, overwriting input i."""
    op = Elemwise(op_class(), ((0, i),))
    return Apply(op, [var], [var.type]).outputs[0]


def test_a_dead_intermediate_is_overwritten():
    x = vg.tensor("x", shape=(None,), dtype="float64")
    graph = check_same_results([x], [vg.sin(vg.exp(x))], [np.arange(4.0)])
    (node,) = destroyers(graph)
    assert node.op.inplace_pattern == ((0, 0),) and type(node.op.scalar_op) is Sin
    assert graph.dedup_nodes is False


def test_graph_inputs_are_never_overwritten():
    x = vg.tensor("x", shape=(None,), dtype="float64")
    graph = check_same_results([x], [vg.exp(x) + 1], [np.arange(3.0)], "fast_run")
    assert not destroyers(graph)


def test_a_value_read_later_is_not_overwritten():
    x = vg.tensor("x", shape=(None,), dtype="float64")
    e = vg.exp(x)
    a = vg.sin(e)  # e is read again by the add below: sin must not overwrite it
    graph = check_same_results([x], [a + e], [np.arange(4.0)])
    sin = next(n for n in graph.toposort() if type(n.op.scalar_op) is Sin)
    assert not sin.op.destroy_map
    (add,) = destroyers(graph)  # the add may: sin, the other reader, runs before it
    assert add is graph.outputs[0].owner


def test_graph_outputs_are_not_overwritten():
    x = vg.tensor("x", shape=(None,), dtype="float64")
    e = vg.exp(x)
    graph = check_same_results([x], [e, vg.sin(e)], [np.arange(4.0)])
    assert not destroyers(graph)


def test_shapes_must_provably_match():
    x = vg.tensor("x", shape=(None,), dtype="float64")
    y = vg.tensor("y", shape=(None,), dtype="float64")
    # exp(x) may have length 1 and broadcast against y: the sum cannot be written into it
    graph = check_same_results([x, y], [vg.exp(x) + y], [np.array([0.5]), np.arange(3.0)])
    assert not destroyers(graph)


def test_handler_rejects_destroying_inputs_views_and_constants():
    x = vg.tensor("x", shape=(None, 2), dtype="float64")
    for target in (x, vg.transpose(x), vg.constant(np.ones((2, 2)))):
        fg = FunctionGraph([x], [inplace_node(Exp, target)])
        with pytest.raises(InconsistencyError):
            fg.attach_feature(DestroyHandler())
            fg.validate()


def test_handler_rejects_two_destroyers_of_one_value():
    x = vg.tensor("x", shape=(None,), dtype="float64")
    e = vg.exp(x)
    fg = FunctionGraph([x], [inplace_node(Sin, e) * inplace_node(Cos, e)])
    with pytest.raises(InconsistencyError):
        fg.attach_feature(DestroyHandler())
        fg.validate()


def test_handler_reverts_refused_replacements():
    x = vg.tensor("x", shape=(None,), dtype="float64")
    e = vg.exp(x)
    fg = FunctionGraph([x], [vg.sin(e) * vg.cos(e)], clone=True)
    guard_inplace(fg)
    before = fg.toposort()
    (sin,) = [n for n in fg.apply_nodes if type(n.op.scalar_op) is Sin]
    with pytest.raises(InconsistencyError):
        fg.replace_all_validate([(sin.outputs[0], inplace_node(Sin, sin.inputs[0]))])
    assert fg.toposort() == before


def test_compile_freezes_inplace_graphs_without_merging_twins():
    x = vg.tensor("x", shape=(None,), dtype="float64")
    graph = _optimize([x], [vg.sin(vg.exp(x))], NO_FUSION)
    assert graph.dedup_nodes is False and destroyers(graph)
    plain = _optimize([x], [vg.sin(vg.exp(x))], "fast_compile")
    assert plain.dedup_nodes is True


def test_reference_runner_overwrites_only_intermediates():
    x = vg.tensor("x", shape=(3,), dtype="float64")
    graph = freeze([x], [inplace_node(Sin, vg.exp(x))])
    value = np.arange(3.0)
    (out,) = ReferenceRunner(graph)([value])
    np.testing.assert_allclose(out, np.sin(np.exp(np.arange(3.0))))
    np.testing.assert_array_equal(value, np.arange(3.0))
    bad = freeze([x], [inplace_node(Sin, x)])  # an invalid graph fails loudly
    with pytest.raises(ValueError):
        ReferenceRunner(bad)([value])


def test_numba_backend_writes_into_the_destroyed_buffer():
    x = vg.tensor("x", shape=(None, 3), dtype="float64")
    e = vg.exp(x)
    outs = [vg.sin(e) * 2.0, vg.cos(vg.transpose(e))]
    graph = optimized([x], outs)
    (node,) = destroyers(graph)  # the product overwrites sin(e); nothing may overwrite e
    assert node is graph.outputs[0].owner
    f = Function(graph, ["x"], False, "cpu", "fast_run")
    assert "inplace" in str(f.program)
    xv = np.arange(6.0).reshape(2, 3) / 6
    xc = xv.copy()
    got = f(xv)
    np.testing.assert_array_equal(xv, xc)
    want = ReferenceRunner(freeze([x], outs))([xc])
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12)


def test_set_and_inc_subtensor_write_into_a_dead_x_only():
    x = vg.tensor("x", shape=(None,), dtype="float64")
    i = vg.tensor("i", shape=(None,), dtype="int64")
    y = vg.exp(x)
    w = vg.inc_subtensor(vg.set_subtensor(y[1:3], 0.0)[i], 1.0)
    values = [np.arange(5.0), np.array([0, 0, 4])]
    graph = check_same_results([x, i], [w], values)
    assert [type(n.op).__name__ for n in destroyers(graph)] == ["IncSubtensor",
                                                                "AdvancedIncSubtensor"]
    graph = check_same_results([x, i], [w * vg.sum(y)], values)  # y is read after the set
    assert [type(n.op).__name__ for n in destroyers(graph)] == ["AdvancedIncSubtensor",
                                                                "Elemwise"]
    graph = check_same_results([x, i], [vg.set_subtensor(x[:2], 1.0)], values)
    assert not destroyers(graph)  # x is a graph input


def test_a_long_chain_becomes_inplace_in_linear_time():
    x = vg.tensor("x", shape=(None,), dtype="float64")
    y = vg.exp(x)
    for k in range(1500):
        y = vg.sin(y) if k % 2 else y * x
    fg = FunctionGraph([x], [y], clone=True)
    t0 = time.process_time()
    rewrite_graph(fg, NO_FUSION)
    elapsed = time.process_time() - t0
    assert sum(1 for n in fg.apply_nodes if n.op.destroy_map) == 1500
    assert elapsed < 5.0, elapsed  # validation must stay linear (8000 nodes once took 30 s)
