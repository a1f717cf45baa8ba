"""scan_remove_unused: unused Scan outputs and the inputs only they needed are dropped."""

from __future__ import annotations

import numpy as np

import verglas as vg
from verglas.graph import FunctionGraph, freeze
from verglas.ops.scan import Scan, ScanLayout
from verglas.graph.reference import ReferenceRunner
from verglas.rewrite import get_mode, rewrite_graph
from verglas.rewrite.scan import scan_remove_unused, tail_read
from verglas.rewrite.trace import RewriteProfile
from verglas.testing import verify_grad

SCAN_ONLY = get_mode("fast_run").excluding("fusion", "inplace", "optimize_inner_graphs",
                                           "scan_save_mem")


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


# -- scan_save_mem -----------------------------------------------------------------------------
SCAN_AND_SAVE = get_mode("fast_run").excluding("fusion", "inplace", "optimize_inner_graphs")


def fired(inputs, outputs, name, mode="fast_run"):
    """(the rewritten frozen graph, how many times rewrite `name` fired)."""
    prof = RewriteProfile()
    fg = FunctionGraph(inputs, outputs, clone=True)
    rewrite_graph(fg, mode, trace=prof)
    return fg.freeze(), prof.rewrites.get(name, [0, 0])[1]


def test_tail_reads():
    x, n = vg.tensor("x", shape=(None, 3)), vg.scalar("n", dtype="int64")
    fg = FunctionGraph([x, n], [x[-1], x[-3:, 1], x[2:][-2]], clone=False)
    assert tail_read(fg, x) == 4  # x[2:][-2]: the 4th entry from the end at most
    assert tail_read(FunctionGraph([x], [x[-1], x[0]]), x) is None
    assert tail_read(FunctionGraph([x, n], [x[n]]), x) is None
    assert tail_read(FunctionGraph([x], [x[::-1][0]]), x) is None
    assert tail_read(FunctionGraph([x], [x]), x) is None  # an output: all of it
    assert tail_read(FunctionGraph([x], [x[-2:, 0], vg.sum(x[-1])]), x) == 2


def test_save_mem_keeps_the_last_entries_and_results_are_unchanged():
    x, s0 = vg.tensor("x", shape=(None,)), vg.scalar("s0")
    acc = vg.scan(lambda x_t, a: a * 0.9 + x_t, sequences=x, outputs_info=s0)
    ys = vg.scan(lambda x_t: vg.exp(x_t), sequences=x)
    outs = [acc[-1], acc[-2:], ys[-1]]
    # (ys reads no state: scan_push_out_outputs would compute it without a loop)
    graph, fires = fired([x, s0], outs, "scan_save_mem",
                         get_mode("fast_run").excluding("scan_push_out_outputs"))
    assert fires >= 1
    keeps = [n.op.layout.keep for n in scans(graph)]
    # one loop (scan_merge: the same sequence); acc: acc[1:][-2:] reads the last 3 entries of
    # its buffer; ys: its last
    assert keeps == [(3, 1)]
    values = [np.array([0.5, -1.0, 2.0, 0.25]), np.array(0.3)]
    same_results([x, s0], outs, graph, values)
    want = [0.3]
    for v in values[0]:
        want.append(want[-1] * 0.9 + v)
    got = vg.compile([x, s0], outs, mode="reference")(*values)
    np.testing.assert_allclose(got[0], want[-1])
    np.testing.assert_allclose(got[1], want[-2:])
    np.testing.assert_allclose(got[2], np.exp(values[0][-1]))


def test_save_mem_does_not_fire_on_a_whole_trace():
    x, s0 = vg.tensor("x", shape=(None,)), vg.scalar("s0")
    acc = vg.scan(lambda x_t, a: a + x_t, sequences=x, outputs_info=s0)
    _, fires = fired([x, s0], [acc, acc[-1]], "scan_save_mem")
    assert fires == 0


def test_gradient_through_a_kept_scan_by_finite_differences():
    x, w = vg.tensor("x", shape=(None,)), vg.scalar("w")
    op_graph, _ = fired([x, w], [vg.scan(lambda x_t, a, w: vg.tanh(a * w + x_t), sequences=x,
                                         outputs_info=vg.as_tensor(0.1),
                                         non_sequences=w)[-1]], "scan_save_mem", SCAN_AND_SAVE)
    (node,) = scans(op_graph)
    assert node.op.layout.keep == (2,)
    kept = node.op  # differentiate through the op that holds only its last entries

    def last(x, w):
        n = vg.as_tensor(x).shape[0]
        return kept(n, x, vg.as_tensor(0.1), w)[-1]

    verify_grad(last, [np.array([0.3, -0.2, 0.5]), np.array(0.7)])
