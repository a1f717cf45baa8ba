"""Scan: loops with sequences, mit-sot / sit-sot / nit-sot outputs, non-sequences, n_steps."""

import pickle

import cloudpickle
import numpy as np
import pytest

import verglas as vg
from verglas.graph.traversal import toposort
from verglas.ops.scan import Scan, ScanLayout
from verglas.ops.scan import scan_buffers
from verglas.testing import verify_grad


def _run(inputs, outputs, *values):
    return vg.compile(inputs, outputs, mode="reference")(*values)


def _cumsum(x, init):
    return vg.scan(lambda x_t, acc: acc + x_t, sequences=x, outputs_info=init)


def test_sit_sot_cumsum():
    x, s0 = vg.tensor("x", shape=(None, 2)), vg.tensor("s0", shape=(2,))
    out = _cumsum(x, s0)
    assert out.type.shape == (None, 2)
    xv, s0v = np.arange(10.0).reshape(5, 2), np.array([1.0, -1.0])
    np.testing.assert_allclose(_run([x, s0], out, xv, s0v), s0v + np.cumsum(xv, axis=0))


def test_every_kind_of_output():
    x, w = vg.tensor("x", shape=(None,)), vg.scalar("w")
    m0, s0 = vg.tensor("m0", shape=(2,)), vg.scalar("s0")

    def step(x_prev, x_t, m_2, m_1, s, w):
        m = m_2 * 0.5 + m_1 * w + x_t
        return [m, s + x_prev * x_t, m * s]

    mit, sit, nit = vg.scan(step, sequences=dict(input=x, taps=[-1, 0]),
                            outputs_info=[dict(initial=m0, taps=[-2, -1]), s0, None],
                            non_sequences=w)
    xv, wv, m0v, s0v = np.array([1.0, 2.0, -1.0, 0.5, 3.0]), 0.3, np.array([0.2, -0.4]), 1.5
    ms, ss, ns = list(m0v), [s0v], []
    for t in range(1, len(xv)):  # taps [-1, 0]: the first step reads x[0] and x[1]
        m = ms[-2] * 0.5 + ms[-1] * wv + xv[t]
        ns.append(m * ss[-1])
        ms.append(m)
        ss.append(ss[-1] + xv[t - 1] * xv[t])
    got = _run([x, w, m0, s0], [mit, sit, nit], xv, wv, m0v, s0v)
    for g, want in zip(got, [ms[2:], ss[1:], ns]):
        np.testing.assert_allclose(g, want)
    op = mit.owner.inputs[0].owner.op
    assert op.layout == ScanLayout(seq_offsets=((0, 1),), mit_sot_taps=((-2, -1),),
                                   n_sit_sot=1, n_nit_sot=1, n_non_seqs=1)


def test_nit_sot_map_and_outputs_info_none():
    x = vg.tensor("x", shape=(None, 3))
    y = vg.scan(lambda row: vg.sum(row * row), sequences=[x])
    xv = np.arange(12.0).reshape(4, 3)
    np.testing.assert_allclose(_run([x], y, xv), (xv ** 2).sum(axis=1))


def test_symbolic_n_steps_and_zero_steps():
    n, a0 = vg.scalar("n", dtype="int64"), vg.scalar("a0")
    powers = vg.scan(lambda a: a * 2.0, outputs_info=a0, n_steps=n)
    np.testing.assert_allclose(_run([n, a0], powers, 4, 1.0), [2.0, 4.0, 8.0, 16.0])
    got = _run([n, a0], powers, 0, 1.0)
    assert got.shape == (0,)
    x = vg.tensor("x", shape=(None, 3))
    y = vg.scan(lambda row: row * 2.0, sequences=x, n_steps=0)
    assert y.type.shape == (0, 3)
    assert _run([x], y, np.ones((2, 3))).shape == (0, 3)
    assert _run([x], vg.scan(lambda row: row * 2.0, sequences=x), np.ones((0, 3))).shape \
        == (0, 3)
    with pytest.raises(ValueError, match="Scan.*n_steps is -1"):
        _run([n, a0], powers, -1, 1.0)


def test_shortest_sequence_and_too_short_sequence():
    x, y = vg.tensor("x", shape=(None,)), vg.tensor("y", shape=(None,))
    z = vg.scan(lambda a, b: a * b, sequences=[x, y])
    np.testing.assert_allclose(_run([x, y], z, np.arange(5.0), np.arange(3.0)), [0, 1, 4])
    n = vg.scalar("n", dtype="int64")
    z = vg.scan(lambda a: a + 1.0, sequences=x, n_steps=n)
    np.testing.assert_allclose(_run([x, n], z, np.arange(5.0), 2), [1.0, 2.0])
    with pytest.raises(ValueError, match="Scan.*sequence 0 has length 5"):
        _run([x, n], z, np.arange(5.0), 6)


def test_step_function_closure_becomes_a_non_sequence():
    x, w = vg.tensor("x", shape=(None,)), vg.scalar("w")
    w2 = w * 2.0
    y = vg.scan(lambda a: a * w2, sequences=x)  # w read from the enclosing scope
    z = vg.scan(lambda a, v: a * v + w, sequences=x, non_sequences=w)  # w twice: one input
    np.testing.assert_allclose(_run([x, w], y, np.arange(3.0), 1.5), np.arange(3.0) * 3.0)
    np.testing.assert_allclose(_run([x, w], z, np.arange(3.0), 2.0), np.arange(3.0) * 2 + 2)
    assert z.owner.op.layout.n_non_seqs == 1


def test_state_static_shape_is_relaxed_to_fit_the_step():
    h0, m = vg.zeros((3,)), vg.tensor("m", shape=(None, None))
    x = vg.tensor("x", shape=(None,))
    h = vg.scan(lambda x_t, h, m: vg.tanh(h @ m + x_t), sequences=x, outputs_info=h0,
                non_sequences=m)
    mv, xv = np.eye(3) * 0.5, np.array([0.1, 0.2])
    want, hv = [], np.zeros(3)
    for xt in xv:
        hv = np.tanh(hv @ mv + xt)
        want.append(hv)
    np.testing.assert_allclose(_run([x, m], h, xv, mv), want)


def test_errors():
    x, s0 = vg.tensor("x", shape=(None,)), vg.scalar("s0")
    with pytest.raises(ValueError, match="scan: the step function returned 2 outputs.*1 entry"):
        vg.scan(lambda a, s: [s + a, s], sequences=x, outputs_info=[s0])
    with pytest.raises(TypeError, match="scan: output 1 .*float32.*outputs_info\\[1\\]"):
        vg.scan(lambda a, s, t: [s + a, vg.cast(t + a, "float32")], sequences=x,
                outputs_info=[s0, s0])
    with pytest.raises(TypeError, match="scan: output 0 .*ndim"):
        vg.scan(lambda a, s: vg.stack([s, a]), sequences=x, outputs_info=s0)
    with pytest.raises(ValueError, match="scan: n_steps is needed"):
        vg.scan(lambda s: s, outputs_info=s0)
    with pytest.raises(ValueError, match="scan: outputs_info\\[0\\].*leading length 3"):
        vg.scan(lambda a, b: a + b, outputs_info=dict(initial=vg.zeros((3,)), taps=[-2, -1]),
                n_steps=2)
    node = vg.scan(lambda a, s: s + a, sequences=x, outputs_info=s0).owner.inputs[0].owner
    with pytest.raises(TypeError, match="Scan.*sequence 0 has type .*expected float64 of shape"):
        node.op(node.inputs[0], vg.tensor("m", shape=(None, None)), s0)
    with pytest.raises(TypeError, match="Scan.*expected 3 inputs"):
        node.op(node.inputs[0], x)
    with pytest.raises(ValueError, match="Scan.*mit-sot initial value 0 has leading length 1"):
        m0 = vg.tensor("m0", shape=(None,))
        y = vg.scan(lambda a, b: a + b, outputs_info=dict(initial=m0, taps=[-2, -1]),
                    n_steps=2)
        _run([m0], y, np.ones(1))
    for layout in (dict(n_sit_sot=1, until=True, backwards=True),
                   dict(n_nit_sot=1, keep=(2,), backwards=True)):
        with pytest.raises(ValueError, match="runs backwards"):
            ScanLayout(**layout).check()


def test_equality_and_pickling():
    def build():
        x, s0 = vg.tensor("x", shape=(None,)), vg.scalar("s0")
        return x, s0, _cumsum(x, s0)

    x, s0, out = build()
    _, _, out2 = build()
    op, op2 = out.owner.inputs[0].owner.op, out2.owner.inputs[0].owner.op
    assert isinstance(op, Scan) and op == op2 and hash(op) == hash(op2)
    assert op.fgraph.outputs[0] is op2.fgraph.outputs[0]
    for dumps, loads in ((pickle.dumps, pickle.loads), (cloudpickle.dumps, cloudpickle.loads)):
        assert loads(dumps(op)) == op
    f = vg.compile([x, s0], out, mode="reference")
    f(np.ones(2), 0.0)
    for dumps, loads in ((pickle.dumps, pickle.loads), (cloudpickle.dumps, cloudpickle.loads)):
        np.testing.assert_allclose(loads(dumps(f))(np.arange(4.0), 1.0), [1, 2, 4, 7])


def test_restrict_drops_unused_outputs_and_inputs():
    x, w, s0 = vg.tensor("x", shape=(None,)), vg.scalar("w"), vg.scalar("s0")
    a, b, c = vg.scan(lambda x_t, a, b, w: [a + x_t, b * w, a * 2.0], sequences=x,
                      outputs_info=[s0, s0, None], non_sequences=w)
    node = a.owner.inputs[0].owner
    # keep only the nit-sot: it needs sit-sot 0 (it reads its tap) but not sit-sot 1 nor w
    new_op, ins, outs = node.op.restrict([2])
    assert outs == (0, 2) and ins == (0, 1, 2)
    assert new_op.layout == ScanLayout(seq_offsets=((0,),), n_sit_sot=1, n_nit_sot=1)
    new_outs = new_op(*[node.inputs[i] for i in ins])
    xv = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(_run([x, s0], new_outs[1], xv, 0.5), _run([x, w, s0], c, xv, 1.0,
                                                                           0.5))
    assert node.op.restrict(range(3)) is None


def test_infer_shape():
    x, h0 = vg.tensor("x", shape=(None, 4)), vg.tensor("h0", shape=(None,))
    h, y = vg.scan(lambda x_t, h: [h + vg.sum(x_t), vg.concatenate([x_t, h])],
                   sequences=x, outputs_info=[h0, None])
    node = h.owner.inputs[0].owner
    sym = [vg.scalar(f"d{i}", dtype="int64") for i in range(4)]
    n, xs, hs = node.inputs[0], (sym[0], sym[1]), (sym[2],)
    shapes = node.op.infer_shape(None, node, [(), xs, hs])
    f = vg.compile([node.inputs[1], h0, *sym[:3]], [d for s in shapes for d in s],
                   mode="reference")
    got = [int(v) for v in f(np.zeros((5, 4)), np.zeros(2), 5, 4, 2)]
    assert got == [6, 2, 5, 6]
    del n


def test_scan_inside_op_from_graph():
    x = vg.tensor("x", shape=(None,))
    op = vg.OpFromGraph([x], [vg.scan(lambda a, s: s * a, sequences=x,
                                      outputs_info=vg.as_tensor(1.0))])
    u = vg.tensor("u", shape=(None,))
    np.testing.assert_allclose(_run([u], op(u), np.array([1.0, 2.0, 3.0])), [1.0, 2.0, 6.0])


# -- gradients -------------------------------------------------------------------------------
def test_grad_cumsum_like():
    rng = np.random.default_rng(0)
    verify_grad(lambda x, s0: vg.scan(lambda x_t, acc: acc * 0.9 + x_t * acc + x_t,
                                         sequences=x, outputs_info=s0),
                   [rng.normal(size=(4, 2)), rng.normal(size=2)])


def test_grad_rnn():
    rng = np.random.default_rng(1)
    T, D, H = 4, 3, 2

    def rnn(x, W, U, b, h0):
        return vg.scan(lambda x_t, h, W, U, b: vg.tanh(x_t @ W + h @ U + b), sequences=x,
                       outputs_info=h0, non_sequences=[W, U, b])

    verify_grad(rnn, [rng.normal(size=(T, D)), rng.normal(size=(D, H)) * 0.5,
                         rng.normal(size=(H, H)) * 0.5, rng.normal(size=H),
                         rng.normal(size=H)])
    # the last state only (the rest of the trace gets zero cotangents)
    verify_grad(lambda *args: rnn(*args)[-1],
                   [rng.normal(size=(T, D)), rng.normal(size=(D, H)), rng.normal(size=(H, H)),
                    rng.normal(size=H), rng.normal(size=H)])


def test_grad_mit_sot_fibonacci_like():
    def fib(init, a, b):
        return vg.scan(lambda x2, x1, a, b: a * x2 + b * x1 * x1,
                       outputs_info=dict(initial=init, taps=[-2, -1]),
                       non_sequences=[a, b], n_steps=5)

    verify_grad(fib, [np.array([0.3, -0.2]), np.array(0.8), np.array(0.6)])
    # taps with a gap: x_t = x_{t-3} - 0.5 x_{t-1}
    verify_grad(lambda init: vg.scan(lambda x3, x1: x3 - 0.5 * x1 * x3,
                                        outputs_info=dict(initial=init, taps=[-3, -1]),
                                        n_steps=4), [np.array([0.5, 1.0, -1.0])])


def test_grad_nit_sot_map_and_sequence_taps():
    rng = np.random.default_rng(2)
    verify_grad(lambda x, w: vg.scan(lambda x_t, w: vg.sin(x_t) * w, sequences=x,
                                        non_sequences=w),
                   [rng.normal(size=(3, 2)), rng.normal(size=2)])
    verify_grad(lambda x: vg.scan(lambda x0, x2: x0 * x2, sequences=dict(input=x,
                                                                          taps=[0, 2])),
                   [rng.normal(size=6)])


def test_grad_every_kind_and_zero_steps():
    def loop(x, m0, s0, w):
        m, s, y = vg.scan(lambda xp, xt, m2, m1, s, w: [m2 * w + m1 * xt, s * xt + xp, s * m1],
                          sequences=dict(input=x, taps=[-1, 0]),
                          outputs_info=[dict(initial=m0, taps=[-2, -1]), s0, None],
                          non_sequences=w)
        return vg.sum(m) + vg.sum(s * s) + vg.sum(y)

    rng = np.random.default_rng(3)
    point = [rng.normal(size=4), rng.normal(size=2), np.array(0.4), np.array(0.7)]
    verify_grad(loop, point)
    verify_grad(loop, [point[0][:1]] + point[1:])  # one sequence entry: zero steps
    n = vg.scalar("n", dtype="int64")
    x = vg.tensor("x", shape=(None,))
    s = vg.scan(lambda a, s: s + a, sequences=x, outputs_info=vg.as_tensor(0.0), n_steps=n)
    g = vg.grad(vg.sum(s), x)
    np.testing.assert_allclose(_run([x, n], g, np.ones(4), 0), np.zeros(4))
    np.testing.assert_allclose(_run([x, n], g, np.ones(4), 2), [2.0, 1.0, 0.0, 0.0])


def test_a_loop_of_no_step_collects_rows_of_the_shape_its_inputs_give():
    """With no step to take a row's shape from, a collected output's rows have the lengths
    the body's shape inference gives from the inputs' lengths (the gradient of a sequence has
    the sequence's shape); a length read from values is 0."""
    x = vg.tensor("x", shape=(None, None))
    w = vg.tensor("w", shape=(None, None))
    h0 = vg.tensor("h0", shape=(None,))
    k = vg.scalar("k", dtype="int64")
    hs = vg.scan(lambda x_t, h: vg.tanh(x_t + h @ w), sequences=x, outputs_info=h0)
    tails = vg.scan(lambda x_t: x_t[1:] * 2, sequences=x)
    sized = vg.scan(lambda x_t: vg.zeros((k,)) + x_t[0], sequences=x)
    gx = vg.grad(vg.sum(hs**2), x)
    values = [np.zeros((0, 3)), np.ones((3, 3)), np.ones(3), np.int64(2)]
    got = _run([x, w, h0, k], [gx, tails, sized], *values)
    assert [g.shape for g in got] == [(0, 3), (0, 2), (0, 0)]
    assert _run([x, w, h0, k], tails, np.ones((0, 1)), *values[1:]).shape == (0, 0)


def _backwards_loop(x, h, w):
    """A loop over x's rows last to first (layout `backwards`): a state, and a collected
    output written in x's order."""
    (hs, ys), _ = scan_buffers(lambda x_t, h: [vg.tanh(h @ w + x_t), vg.sin(h) * x_t],
                               sequences=[x], outputs_info=[h, None], backwards=True)
    return hs, ys


def _backwards_numpy(x, h, w):
    hs, ys = [h], np.zeros_like(x)
    for t in range(len(x)):
        r = len(x) - 1 - t
        ys[r] = np.sin(h) * x[r]
        h = np.tanh(h @ w + x[r])
        hs.append(h)
    return np.array(hs), ys


@pytest.mark.parametrize("mode", ["reference", "fast_run"])
def test_a_loop_that_runs_backwards_and_its_gradients(mode):
    """A gradient's loop runs backwards over its sequences: its step s reads row n - 1 - s and
    writes its collected row there, so no view between the loops is reversed. Its own
    gradient (a second derivative through a loop) is a forward loop over state windows
    read reversed."""
    x, h0, w = vg.tensor("x", shape=(None, 3)), vg.tensor("h0", shape=(3,)), vg.tensor(
        "w", shape=(3, 3))
    hs, ys = _backwards_loop(x, h0, w)
    assert hs.owner.op.layout.backwards and "backwards" in repr(hs.owner.op)
    rng = np.random.default_rng(7)
    point = [rng.normal(size=(5, 3)), rng.normal(size=3), rng.normal(size=(3, 3)) * 0.5]
    f = vg.compile([x, h0, w], [hs, ys], mode=mode)
    for got, want in zip(f(*point), _backwards_numpy(*point)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)

    def loss(x, h, w):
        hs, ys = _backwards_loop(x, h, w)
        return vg.sum(hs**2) + vg.sum(ys * ys[::-1])

    def second_order(x, h, w):
        hs = vg.scan(lambda x_t, h: vg.tanh(h @ w + x_t), sequences=x, outputs_info=h)
        g = vg.grad(vg.sum(hs**2), x)
        return vg.sum(g * g[::-1]) + vg.sum(vg.grad(vg.sum(hs[-2:] ** 3), w) ** 2)

    verify_grad(loss, point, mode=mode)
    verify_grad(second_order, point, mode=mode)


def test_restrict_prunes_the_backward_loop():
    x, W = vg.tensor("x", shape=(None, 3)), vg.tensor("W", shape=(3, 2))
    U, h0 = vg.tensor("U", shape=(2, 2)), vg.tensor("h0", shape=(2,))
    h = vg.scan(lambda x_t, h, W, U: vg.tanh(x_t @ W + h @ U), sequences=x, outputs_info=h0,
                non_sequences=[W, U])
    # the backward loop as the scan's L_op builds it: every input's gradient (grad then
    # restricts it to those asked for: test_grad)
    forward = h.owner.inputs[0].owner
    grads = forward.op.L_op(forward.inputs, forward.outputs,
                            [vg.ones_like(o) for o in forward.outputs])
    gW = grads[forward.inputs.index(W)]
    back = next(n for n in toposort([gW])
                if isinstance(n.op, Scan) and n is not forward)
    assert back.op.layout.n_nit_sot == 1  # dx
    used = [i for i, o in enumerate(back.outputs)
            if any(o in n.inputs for n in toposort([gW]))]
    assert len(used) == 1 < len(back.outputs)
    new_op, ins, outs = back.op.restrict(used)
    # only the window of the state's gradient and the W accumulator survive: no dU, no dx
    assert new_op.layout.n_sit_sot == 2 and new_op.layout.n_nit_sot == 0
    assert outs == (0, used[0]) and len(ins) < len(back.inputs)
    assert new_op.replace(layout=new_op.layout) is new_op


# -- loops with a stopping condition ---------------------------------------------------------------
def _doubling(limit=100.0):
    x0, n = vg.scalar("x0"), vg.scalar("n", dtype="int64")
    xs = vg.scan(lambda x: (x * 2, vg.until(x * 2 > limit)), outputs_info=x0, n_steps=n)
    return [x0, n], xs


@pytest.mark.parametrize("x0, n, want", [
    (3.0, 50, [6, 12, 24, 48, 96, 192]),  # stops after the first step whose condition holds
    (3.0, 3, [6, 12, 24]),  # n_steps is the most steps it runs
    (200.0, 50, [400]),  # true at the first step: one step
    (3.0, 0, []),
])
def test_until_stops_after_the_first_step_whose_condition_holds(x0, n, want):
    inputs, xs = _doubling()
    got = vg.compile(inputs, xs, mode="reference")(x0, n)
    np.testing.assert_array_equal(got, np.array(want, dtype="float64"))


def test_until_with_every_output_kind_and_sequences():
    u = vg.tensor("u", shape=(None,))
    f0 = vg.tensor("f0", shape=(2,))
    fib, sums, seen = vg.scan(
        lambda u_t, a, b, s: ([a + b, s + u_t, u_t * 2], vg.until(s + u_t > 3.0)),
        sequences=u, outputs_info=[dict(initial=f0, taps=[-2, -1]), vg.as_tensor(0.0), None])
    f = vg.compile([u, f0], [fib, sums, seen], mode="reference")
    fib_v, sums_v, seen_v = f(np.array([1.0, 1.5, 2.0, 0.5, 9.0]), np.array([1.0, 1.0]))
    np.testing.assert_array_equal(sums_v, [1.0, 2.5, 4.5])  # 4.5 > 3: three steps ran
    np.testing.assert_array_equal(fib_v, [2.0, 3.0, 5.0])
    np.testing.assert_array_equal(seen_v, [2.0, 3.0, 4.0])


def test_until_gradient_by_finite_differences():
    def fn(x0, w):
        xs = vg.scan(lambda x, w: (vg.tanh(x * w) + 0.5, vg.until(x > 1.2)), outputs_info=x0,
                     non_sequences=w, n_steps=20)
        return vg.sum(xs * xs)
    verify_grad(fn, [np.array(0.1), np.array(0.9)])


def test_until_errors_name_scan_and_until():
    x0 = vg.scalar("x0")
    with pytest.raises(ValueError, match="until"):
        vg.scan(lambda x: (vg.until(x > 1), x), outputs_info=x0, n_steps=3)
    with pytest.raises(ValueError, match="no output"):
        vg.scan(lambda x: vg.until(x > 1), outputs_info=x0, n_steps=3)
    with pytest.raises(ValueError, match="0-d"):
        vg.scan(lambda x: (x, vg.until(vg.stack([x, x]) > 1)), outputs_info=x0, n_steps=3)
