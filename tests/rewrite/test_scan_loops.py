"""The loop rewrites of Scan (verglas/rewrite/scan_loops.py): each fires where it should (the
trace), changes the loop as it says, leaves the results as they were (the reference executor
on the graph before, numpy) and the gradients too (finite differences through the rewritten
loop)."""

from __future__ import annotations

import numpy as np
import pytest

import verglas as vg
from verglas.graph import FunctionGraph, freeze
from verglas.graph.reference import ReferenceRunner
from verglas.ops.basic import DimShuffle
from verglas.ops.linalg import MatMul
from verglas.ops.op_from_graph import rebuild_graph
from verglas.ops.scalar import Exp
from verglas.ops.scan import Scan
from verglas.rewrite import get_mode, rewrite_graph
from verglas.rewrite.trace import RewriteProfile
from verglas.testing import verify_grad

# the loop rewrites on bodies as the user wrote them (no fusion: a Composite has no gradient)
LOOPS = get_mode("fast_run").excluding("fusion", "inplace", "optimize_inner_graphs")


def rewrite(inputs, outputs, mode=LOOPS):
    """(the rewritten frozen graph, {rewrite name: fires})."""
    prof = RewriteProfile()
    fg = FunctionGraph(inputs, outputs, clone=True)
    rewrite_graph(fg, mode, trace=prof)
    return fg.freeze(), {k: v[1] for k, v in prof.rewrites.items()}


def scans(graph):
    return [n for n in graph.toposort() if isinstance(n.op, Scan)]


def body_ops(node, op_class):
    return [n for n in node.op.fgraph.toposort() if isinstance(n.op, op_class)]


def check(inputs, outputs, graph, values, numpy_values=None):
    """The rewritten graph computes what the graph before did (and numpy, if given)."""
    want = ReferenceRunner(freeze(inputs, outputs))([np.asarray(v) for v in values])
    got = ReferenceRunner(graph)([np.asarray(v) for v in values])
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
    for g, w in zip(got, numpy_values or []):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


def grads_through(graph, values):
    """Finite differences against vg.grad through the rewritten graph (its first output)."""
    def fn(*args):
        return rebuild_graph(graph, args)[0]
    verify_grad(fn, values)


def rnn_step(x_t, h, w, u):
    return vg.tanh(h @ w + x_t @ u)


def np_rnn(x, h0, w, u):
    hs, h = [], h0
    for x_t in x:
        h = np.tanh(h @ w + x_t @ u)
        hs.append(h)
    return np.array(hs)


@pytest.fixture
def rnn_values():
    g = np.random.default_rng(0)
    return [g.normal(size=(5, 3)), g.normal(size=3) * 0.3, g.normal(size=(3, 3)) * 0.4,
            g.normal(size=(3, 3)) * 0.4]


def rnn_vars():
    return (vg.tensor("x", shape=(None, 3)), vg.tensor("h0", shape=(3,)),
            vg.tensor("w", shape=(3, 3)), vg.tensor("u", shape=(3, 3)))


def test_hoist_invariants(rnn_values):
    x, h0, w, u = rnn_vars()
    hs = vg.scan(lambda x_t, h, w: vg.tanh(h @ vg.exp(w) + x_t), sequences=x,
                 outputs_info=h0, non_sequences=w)
    graph, fires = rewrite([x, h0, w], [hs])
    assert fires["scan_hoist_invariants"] >= 1
    (node,) = scans(graph)
    assert not [n for n in node.op.fgraph.toposort()
                if getattr(n.op, "scalar_op", None) == Exp()]  # exp(w) once, before the loop
    assert any(getattr(n.op, "scalar_op", None) == Exp() for n in graph.toposort())
    values = rnn_values[:3]
    want = [np_rnn(values[0], values[1], np.exp(values[2]), np.eye(3))]
    check([x, h0, w], [hs], graph, values, want)
    grads_through(graph, values)


def test_push_out_sequence_products(rnn_values):
    x, h0, w, u = rnn_vars()
    hs = vg.scan(lambda x_t, h: rnn_step(x_t, h, w, u), sequences=x, outputs_info=h0)
    graph, fires = rewrite([x, h0, w, u], [hs])
    assert fires["scan_push_out_seqs"] >= 1
    (node,) = scans(graph)
    assert len(body_ops(node, MatMul)) == 1  # h @ w; x @ u is one product before the loop
    outer = [n for n in graph.toposort() if isinstance(n.op, MatMul)]
    assert len(outer) == 1
    check([x, h0, w, u], [hs], graph, rnn_values, [np_rnn(*rnn_values)])
    grads_through(graph, rnn_values)


def test_push_out_a_state_free_output(rnn_values):
    x, h0, w, u = rnn_vars()
    hs, ys = vg.scan(lambda x_t, h: [rnn_step(x_t, h, w, w), vg.exp(x_t) @ u], sequences=x,
                     outputs_info=[h0, None])
    graph, fires = rewrite([x, h0, w, u], [hs, ys])
    assert fires["scan_push_out_outputs"] >= 1
    (node,) = scans(graph)
    assert node.op.layout.n_nit_sot == 0  # ys is computed after the loop, all steps at once
    x_, h0_, w_, u_ = rnn_values
    check([x, h0, w, u], [hs, ys], graph, rnn_values,
          [np_rnn(x_, h0_, w_, w_), np.exp(x_) @ u_])
    grads_through(graph, rnn_values)


def test_push_out_an_output_projection(rnn_values):
    x, h0, w, u = rnn_vars()
    ys = vg.scan(lambda x_t, h: [rnn_step(x_t, h, w, w), rnn_step(x_t, h, w, w) @ u],
                 sequences=x, outputs_info=[h0, None])[1]
    graph, fires = rewrite([x, h0, w, u], [ys])
    assert fires["scan_push_out_outputs"] >= 1
    (node,) = scans(graph)
    # the loop computes h @ w alone and collects h_t; x_t @ w is one product before it and
    # h_t @ u one after it
    assert len(body_ops(node, MatMul)) == 1
    assert len([n for n in graph.toposort() if isinstance(n.op, MatMul)]) == 2
    x_, h0_, w_, u_ = rnn_values
    check([x, h0, w, u], [ys], graph, rnn_values, [np_rnn(x_, h0_, w_, w_) @ u_])
    grads_through(graph, rnn_values)


def test_push_out_an_accumulated_product(rnn_values):
    x, h0, w, u = rnn_vars()
    acc0 = vg.tensor("acc0", shape=(3, 3))

    def step(x_t, h, acc):
        h_new = rnn_step(x_t, h, w, u)
        return [h_new, acc + vg.expand_dims(x_t, 1) @ vg.expand_dims(h_new, 0)]

    hs, accs = vg.scan(step, sequences=x, outputs_info=[h0, acc0])
    graph, fires = rewrite([x, h0, w, u, acc0], [hs, accs[-1]])
    assert fires["scan_push_out_sums"] >= 1
    (node,) = scans(graph)
    assert node.op.layout.n_sit_sot == 1  # the accumulator is one product after the loop
    values = [*rnn_values, np.eye(3)]
    want_hs = np_rnn(*rnn_values)
    check([x, h0, w, u, acc0], [hs, accs[-1]], graph, values,
          [want_hs, np.eye(3) + values[0].T @ want_hs])
    grads_through(graph, values)


def test_gradient_of_a_loop_has_no_product_per_step_left(rnn_values):
    """The rnn's gradient: the backward loop holds one product per step (the carry's), its
    inputs' gradients are products after it."""
    x, h0, w, u = rnn_vars()
    hs = vg.scan(lambda x_t, h: rnn_step(x_t, h, w, u), sequences=x, outputs_info=h0)
    loss = vg.sum(hs**2)
    grads = vg.grad(loss, [x, h0, w])
    graph, fires = rewrite([x, h0, w, u], grads, get_mode("fast_run"))
    assert fires["scan_push_out_sums"] >= 1 and fires["scan_push_out_outputs"] >= 1
    forward, backward = scans(graph)
    assert len(body_ops(backward, MatMul)) == 1
    # the rows the push-outs batched, (T, 1, H) views whose axis a product drops, cancel
    assert not any(isinstance(n.op, DimShuffle) and n.inputs[0].owner is not None
                   and isinstance(n.inputs[0].owner.op, DimShuffle) for n in graph.toposort())
    want = ReferenceRunner(freeze([x, h0, w, u], grads))(rnn_values)
    got = ReferenceRunner(graph)(rnn_values)
    for g, v in zip(got, want):
        np.testing.assert_allclose(g, v, rtol=1e-10, atol=1e-12)


def test_merge_inputs_given_twice(rnn_values):
    x, h0, w, u = rnn_vars()
    hs = vg.scan(lambda a, b, h, w1, w2: vg.tanh(h @ w1 + a * b) @ w2,
                 sequences=[x, dict(input=x, taps=[0])], outputs_info=h0,
                 non_sequences=[w, w])
    graph, fires = rewrite([x, h0, w], [hs], LOOPS.excluding("scan_push_out_seqs"))
    assert fires["scan_merge_inputs"] >= 1
    (node,) = scans(graph)
    assert node.op.layout.n_seqs == 1 and node.op.layout.n_non_seqs == 1
    x_, h0_, w_ = rnn_values[:3]
    want, h = [], h0_
    for x_t in x_:
        h = np.tanh(h @ w_ + x_t * x_t) @ w_
        want.append(h)
    check([x, h0, w], [hs], graph, rnn_values[:3], [np.array(want)])
    grads_through(graph, rnn_values[:3])


def test_inline_constant_non_sequences(rnn_values):
    x, h0, w, u = rnn_vars()
    c = vg.constant(np.full(3, 0.5))
    hs = vg.scan(lambda x_t, h, c: vg.tanh(h * c + x_t), sequences=x, outputs_info=h0,
                 non_sequences=c)
    graph, fires = rewrite([x, h0], [hs])
    assert fires["scan_inline_constants"] >= 1
    (node,) = scans(graph)
    assert node.op.layout.n_non_seqs == 0
    x_, h0_ = rnn_values[:2]
    want, h = [], h0_
    for x_t in x_:
        h = np.tanh(h * 0.5 + x_t)
        want.append(h)
    check([x, h0], [hs], graph, rnn_values[:2], [np.array(want)])
    grads_through(graph, rnn_values[:2])


def test_merge_loops_over_the_same_sequences(rnn_values):
    x, h0, w, u = rnn_vars()
    sums = vg.scan(lambda x_t, s: s + x_t, sequences=x, outputs_info=vg.zeros(3))
    hs = vg.scan(lambda x_t, h: vg.tanh(h * 0.5 + x_t * h), sequences=x, outputs_info=h0)
    graph, fires = rewrite([x, h0], [sums, hs])
    assert fires["scan_merge"] >= 1
    (node,) = scans(graph)
    assert node.op.layout.n_sit_sot == 2 and node.op.layout.n_seqs == 1
    x_, h0_ = rnn_values[:2]
    want, h = [], h0_
    for x_t in x_:
        h = np.tanh(h * 0.5 + x_t * h)
        want.append(h)
    check([x, h0], [sums, hs], graph, rnn_values[:2], [np.cumsum(x_, axis=0), np.array(want)])
    grads_through(graph, rnn_values[:2])
    # a loop over the same sequence that reads the other's result stays a loop of its own
    chained = vg.scan(lambda x_t, a, c: a + x_t * c, sequences=x, outputs_info=vg.zeros(3),
                      non_sequences=sums[-1])
    graph, fires = rewrite([x], [chained, sums])
    assert len(scans(graph)) == 2
    check([x], [chained, sums], graph, rnn_values[:1])


def test_push_in_an_elementwise_sequence(rnn_values):
    """A sequence computed elementwise (reversed, scaled by a 0-d value) and read by the body's
    elementwise work is computed in the body: the loop reads its operands' rows."""
    x, h0, w, u = rnn_vars()
    c = vg.scalar("c")
    y = (x * c * 2.0)[::-1]  # one (5, 3) array before the loop, unless pushed in
    hs = vg.scan(lambda y_t, h: vg.tanh(h * 0.5 + y_t), sequences=y, outputs_info=h0)
    graph, fires = rewrite([x, h0, c], [hs])
    assert fires["scan_push_in_seqs"] >= 1
    (node,) = scans(graph)
    outside = [n for n in graph.toposort() if n.op.__class__.__name__ == "Elemwise"
               and n.outputs[0].ndim == 2]
    assert not outside  # (x * c * 2 is computed row by row in the loop)
    x_, h0_ = rnn_values[:2]
    want, h = [], h0_
    for x_t in (x_ * 0.7 * 2.0)[::-1]:
        h = np.tanh(h * 0.5 + x_t)
        want.append(h)
    check([x, h0, c], [hs], graph, [x_, h0_, 0.7], [np.array(want)])
    grads_through(graph, [x_, h0_, 0.7])


def test_push_in_only_what_provably_has_the_rows(rnn_values):
    """Operands of unknown lengths that may broadcast along the steps, a sequence another node
    reads too, or one the body reads through a product: the sequence stays as it is."""
    x, h0, w, u = rnn_vars()
    z = vg.tensor("z", shape=(None, 3))
    step = lambda y_t, h: vg.tanh(h * 0.5 + y_t)  # noqa: E731
    for seqs, outs in (((x + z), ()), ((x * 2.0), (x * 2.0,))):
        hs = vg.scan(step, sequences=seqs, outputs_info=h0)
        graph, fires = rewrite([x, z, h0], [hs, *outs])
        assert not fires.get("scan_push_in_seqs")
    hs = vg.scan(lambda y_t, h: vg.tanh(h * 0.5 + y_t @ u), sequences=x * 2.0,
                 outputs_info=h0)
    graph, fires = rewrite([x, h0, u], [hs], LOOPS.excluding("scan_push_out_seqs"))
    assert not fires.get("scan_push_in_seqs")
    # (x + z broadcasts z's one row over x's five: the loop reads what it read before)
    hs = vg.scan(step, sequences=x + z, outputs_info=h0)
    graph, _ = rewrite([x, z, h0], [hs])
    x_, h0_ = rnn_values[:2]
    check([x, z, h0], [hs], graph, [x_, x_[:1], h0_])


def test_gradient_factor_is_collected_once(rnn_values):
    """The rnn's gradient: the inputs' gradient `da @ u.T` and the weight's `hs.T @ da` read
    one collected factor (past the SumToShapes of broadcasting), and the weight gradient of
    the one kept sum is a view of the product, not a copy."""
    x, h0, w, u = rnn_vars()
    hs = vg.scan(lambda x_t, h: rnn_step(x_t, h, w, u), sequences=x, outputs_info=h0)
    loss = vg.mean(hs**2)
    grads = vg.grad(loss, [x, h0, w])
    graph, fires = rewrite([x, h0, w, u], grads, get_mode("fast_run"))
    assert fires["scan_push_in_seqs"] >= 1
    forward, backward = scans(graph)
    assert backward.op.layout.n_nit_sot == 1  # (two push-outs share the one factor)
    assert not [n for n in graph.toposort() if n.op.__class__.__name__ == "Alloc"]
    want = ReferenceRunner(freeze([x, h0, w, u], grads))(rnn_values)
    got = ReferenceRunner(graph)(rnn_values)
    for g, v in zip(got, want):
        np.testing.assert_allclose(g, v, rtol=1e-10, atol=1e-12)
