"""optimize_inner_graphs (new ops, once per op, old ops untouched) and OpFromGraph inlining."""

from __future__ import annotations

import numpy as np

import verglas as vg
from verglas.graph import FunctionGraph, freeze
from verglas.ops.composite import Composite
from verglas.ops.op_from_graph import OpFromGraph
from verglas.ops.scan import Scan
from verglas.graph.reference import ReferenceRunner
from verglas.rewrite import PHASES, RewriteProfile, get_mode, rewrite_graph
from verglas.testing import verify_grad
from verglas.rewrite import inner_graphs as ig


def rewritten(inputs, outputs, mode="fast_run"):
    fg = FunctionGraph(inputs, outputs, clone=True)
    rewrite_graph(fg, mode)
    return fg.freeze(dedup_nodes=not any(n.op.destroy_map for n in fg.apply_nodes))


def same_results(inputs, outputs, graph, values):
    want = ReferenceRunner(freeze(inputs, outputs))([np.asarray(v) for v in values])
    copies = [np.array(v, copy=True) for v in values]
    got = ReferenceRunner(graph)(copies)
    for c, v in zip(copies, values):
        np.testing.assert_array_equal(c, v)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12)


def body_op():
    a = vg.tensor("a", shape=(None,), dtype="float64")
    b = vg.tensor("b", shape=(None,), dtype="float64")
    return OpFromGraph([a, b], [vg.exp(vg.sin(a) * b) + 1])


def test_each_distinct_op_is_optimized_once_into_a_new_op(monkeypatch):
    op = body_op()
    original = op.fgraph
    calls = []

    def counting(op_, mode, tracer=None):
        calls.append(mode)
        return optimized(op_, mode, tracer)

    optimized = ig.optimized_op
    monkeypatch.setattr(ig, "optimized_op", counting)
    x = vg.tensor("x", shape=(None,), dtype="float64")
    y = vg.tensor("y", shape=(None,), dtype="float64")
    outs = [op(x, y), op(y, x), op(x, x)]
    graph = rewritten([x, y], outs)
    nodes = [n for n in graph.toposort() if isinstance(n.op, OpFromGraph)]
    assert len(nodes) == 3 and len({id(n.op) for n in nodes}) == 1
    # every rule, stabilizing too, but inplace; fusion alone again after the loop rewrites;
    # then inplace alone, in the inplace phase
    assert calls == [get_mode("fast_run").excluding("inplace")] + [
        get_mode("fast_run").excluding(*(p.name for p in PHASES if p.name != alone))
        for alone in ("fusion", "inplace")]
    new = nodes[0].op
    assert new != op and op.fgraph is original  # the old op is never edited
    (inner,) = new.fgraph.toposort()
    assert isinstance(inner.op.scalar_op, Composite)
    same_results([x, y], outs, graph, [np.arange(3.0), np.ones(3)])


def test_inner_graphs_get_inplace_with_their_inputs_protected():
    a = vg.tensor("a", shape=(None,), dtype="float64")
    op = OpFromGraph([a], [vg.sin(vg.exp(a)) * 2])
    x = vg.tensor("x", shape=(None,), dtype="float64")
    graph = rewritten([x], [op(x)], get_mode("fast_run").excluding("fusion"))
    (node,) = graph.toposort()
    inner = node.op.fgraph
    assert inner.dedup_nodes is False
    destroyers = [n for n in inner.toposort() if n.op.destroy_map]
    assert destroyers
    for n in destroyers:
        for ins in n.op.destroy_map.values():
            assert n.inputs[ins[0]] not in inner.inputs
    same_results([x], [op(x)], graph, [np.arange(4.0)])


def test_an_unchanged_inner_graph_keeps_its_op():
    a = vg.tensor("a", shape=(None,), dtype="float64")
    op = OpFromGraph([a], [vg.exp(a)])
    x = vg.tensor("x", shape=(None,), dtype="float64")
    (node,) = rewritten([x], [op(x)]).toposort()
    assert node.op is op


def test_inline_op_from_graph_is_expanded():
    a = vg.tensor("a", shape=(None,), dtype="float64")
    op = OpFromGraph([a], [vg.exp(a) * a], inline=True)
    x = vg.tensor("x", shape=(None,), dtype="float64")
    outs = [op(vg.sin(x)) + 1]
    graph = rewritten([x], outs)
    assert not any(isinstance(n.op, OpFromGraph) for n in graph.toposort())
    assert len(graph.toposort()) == 1  # inlined, then fused with its surroundings
    same_results([x], outs, graph, [np.arange(3.0)])


def test_scan_bodies_are_optimized():
    x = vg.tensor("x", shape=(None, 3), dtype="float64")
    h0 = vg.tensor("h0", shape=(3,), dtype="float64")
    hs = vg.scan(lambda x_t, h: vg.tanh(h * 0.5 + vg.exp(x_t) * 0.1), sequences=x,
                 outputs_info=h0)
    graph = rewritten([x, h0], [hs])
    (scan,) = [n for n in graph.toposort() if isinstance(n.op, Scan)]
    inner = scan.op.fgraph.toposort()
    assert len(inner) == 1 and isinstance(inner[0].op.scalar_op, Composite)
    same_results([x, h0], [hs], graph, [np.arange(12.0).reshape(4, 3) / 12, np.ones(3)])


def test_naive_logsumexp_and_softmax_are_stable_wherever_they_sit():
    """log(sum(exp(x))) and exp(x) / sum(exp(x)) over values near 1000 give the stable
    results in the outer graph, in an OpFromGraph and in a Scan body alike."""
    x = vg.tensor("x", shape=(None,), dtype="float64")
    a = vg.tensor("a", shape=(None,), dtype="float64")
    naive_lse = OpFromGraph([a], [vg.log(vg.sum(vg.exp(a)))])
    naive_softmax = OpFromGraph([a], [vg.exp(a) / vg.sum(vg.exp(a), keepdims=True)])
    rows = vg.tensor("rows", shape=(None, None), dtype="float64")
    in_scan = vg.scan(lambda r: vg.log(vg.sum(vg.exp(r))), sequences=rows)
    outs = [vg.log(vg.sum(vg.exp(x))), naive_lse(x), naive_softmax(x), in_scan]
    for mode in ("fast_run", "fast_compile"):
        f = vg.compile([x, rows], outs, mode=mode)
        values = np.array([1000.0, 999.0, 998.0])
        lse, lse_ofg, soft, scanned = f(values, np.stack([values, values + 1]))
        want = 1000.0 + np.log(np.sum(np.exp(values - 1000.0)))
        np.testing.assert_allclose([lse, lse_ofg], [want, want], rtol=1e-12)
        np.testing.assert_allclose(soft, np.exp(values - 1000.0) / np.sum(np.exp(values - 1000.0)),
                                   rtol=1e-12)
        np.testing.assert_allclose(scanned, [want, want + 1], rtol=1e-12)


def test_unused_op_from_graph_outputs_are_removed():
    a = vg.tensor("a", shape=(None,), dtype="float64")
    b = vg.tensor("b", shape=(None,), dtype="float64")
    op = OpFromGraph([a, b], [vg.exp(a) * 2, vg.sin(b), a + b])
    x = vg.tensor("x", shape=(None,), dtype="float64")
    y = vg.tensor("y", shape=(None,), dtype="float64")
    p, q, r = op(x, y)
    prof = RewriteProfile()
    fg = FunctionGraph([x, y], [p * 3, op(y, x)[0]], clone=True)
    rewrite_graph(fg, "fast_run", trace=prof)
    graph = fg.freeze(dedup_nodes=not any(n.op.destroy_map for n in fg.apply_nodes))
    assert prof.rewrites["ofg_remove_unused"][1] >= 1
    nodes = [n for n in graph.toposort() if isinstance(n.op, OpFromGraph)]
    assert nodes and all(len(n.outputs) == 1 and len(n.inputs) == 1 for n in nodes)
    assert len({n.op for n in nodes}) == 1  # one new op, used twice
    same_results([x, y], [p * 3, op(y, x)[0]], graph, [np.arange(3.0), np.ones(3)])
    want = np.exp(np.arange(3.0)) * 6
    got = vg.compile([x, y], p * 3)(np.arange(3.0), np.ones(3))
    np.testing.assert_allclose(got, want)
    verify_grad(lambda u, v: vg.sum(op(u, v)[0] * op(v, u)[0]), [np.arange(3.0), np.ones(3)])
