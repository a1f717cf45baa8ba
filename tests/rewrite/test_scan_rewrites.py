"""scan_remove_unused: unused Scan outputs and the inputs only they needed are dropped."""

from __future__ import annotations

import numpy as np

import verglas as vg
from verglas.graph import FunctionGraph, freeze
from verglas.ops.scan import Scan, ScanLayout
from verglas.graph.reference import ReferenceRunner
from verglas.rewrite import get_mode, rewrite_graph
from verglas.rewrite.scan import scan_remove_unused

SCAN_ONLY = get_mode("fast_run").excluding("fusion", "inplace", "optimize_inner_graphs")


def rewritten(inputs, outputs, mode=SCAN_ONLY):
    fg = FunctionGraph(inputs, outputs, clone=True)
    rewrite_graph(fg, mode)
    return fg.freeze()


def scans(graph):
    return [n for n in graph.toposort() if isinstance(n.op, Scan)]


def same_results(inputs, outputs, graph, values):
    want = ReferenceRunner(freeze(inputs, outputs))(values)
    got = ReferenceRunner(graph)(values)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12)


def three_outputs():
    x, w, s0 = vg.tensor("x", shape=(None,)), vg.scalar("w"), vg.scalar("s0")
    a, b, c = vg.scan(lambda x_t, a, b, w: [a + x_t, b * w, a * 2.0], sequences=x,
                      outputs_info=[s0, s0, None], non_sequences=w)
    return (x, w, s0), (a, b, c)


def test_unused_outputs_and_their_inputs_are_dropped():
    (x, w, s0), (a, b, c) = three_outputs()
    graph = rewritten([x, w, s0], [c])  # c reads a's tap; b and w are dead
    (node,) = scans(graph)
    assert node.op.layout == ScanLayout(seq_offsets=((0,),), n_sit_sot=1, n_nit_sot=1)
    assert graph.inputs[1] not in node.inputs  # w
    same_results([x, w, s0], [c], graph, [np.array([1.0, 2.0, 3.0]), np.array(2.0),
                                          np.array(0.5)])


def test_a_state_read_by_a_kept_output_stays():
    (x, w, s0), (a, b, c) = three_outputs()
    graph = rewritten([x, w, s0], [b])
    (node,) = scans(graph)
    assert node.op.layout == ScanLayout(seq_offsets=(), n_sit_sot=1, n_non_seqs=1)
    same_results([x, w, s0], [b], graph, [np.array([1.0, 2.0, 3.0]), np.array(2.0),
                                          np.array(0.5)])


def test_nothing_fires_when_every_output_is_used():
    (x, w, s0), outs = three_outputs()
    fg = FunctionGraph([x, w, s0], list(outs), clone=True)
    (node,) = [n for n in fg.apply_nodes if isinstance(n.op, Scan)]
    assert scan_remove_unused.fn(fg, node) is None
    (kept,) = scans(rewritten([x, w, s0], list(outs)))
    assert kept.op == node.op


def test_runs_in_fast_compile_too():
    (x, w, s0), (a, b, c) = three_outputs()
    graph = rewritten([x, w, s0], [a], "fast_compile")
    (node,) = scans(graph)
    assert node.op.layout.n_outputs == 1
