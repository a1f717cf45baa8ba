"""Scan loops on the CPU: the body inline in the loop, 0-d states in registers, states computed
straight into their rows, sequences read in place (also backwards), and outputs holding only
their last entries (scan_save_mem: rings) — against the reference executor, for 0, 1 and
several steps, with what `print(f.program)` says."""

from __future__ import annotations

import functools

import numpy as np
import pytest

import verglas as vg
from tests.cpu_backend.utils import compare_backend, compile_pair, expect_error, rng


def _scans(f) -> list:
    return [s for s in f.program.steps if s.loop is not None]


@functools.cache
def scalar_program():
    x0 = vg.scalar("x0", dtype="float64")
    u = vg.tensor("u", shape=(None,), dtype="float64")
    f0 = vg.tensor("f0", shape=(2,), dtype="int64")
    n = vg.scalar("n", dtype="int64")
    xs = vg.scan(lambda u_t, x: 0.5 * x + u_t, sequences=u, outputs_info=x0)
    fib = vg.scan(lambda a, b: a + b, outputs_info=dict(initial=f0, taps=[-2, -1]), n_steps=n)
    # the last value, the last three, fib's last (a ring of 3 registers' values: [2:][-1])
    return [x0, u, f0, n], [xs[-1], xs[-3:], fib[-1], vg.sum(xs)]


@pytest.mark.parametrize("steps", [1, 2, 7])
def test_scalar_states_live_in_registers(steps):
    inputs, outputs = scalar_program()
    g = rng(steps)
    compare_backend(inputs, outputs, [np.float64(0.3), g.normal(size=steps + 2),
                                      np.array([1, 1]), np.int64(steps)])
    f, _ = compile_pair(inputs, outputs)
    text = str(f.program)
    assert "in registers across steps: state0" in text, text
    assert "keep=[1]" in text or "keep=[3]" in text, text
    body = f.source()[f.source().index("def program("):]
    assert "def sub" not in f.source()  # no function per step: the body is inline
    assert "np.full((1,)" not in body  # no 0-d array per step


@functools.cache
def array_program():
    h0 = vg.tensor("h0", shape=(None,), dtype="float32")
    x = vg.tensor("x", shape=(None, None), dtype="float32")
    w = vg.tensor("w", shape=(None, None), dtype="float32")
    s0 = vg.tensor("s0", shape=(3, None), dtype="float32")

    def step(x_t, x_back, h, w):
        return vg.tanh(h @ w + x_t * x_back)

    hs = vg.scan(step, sequences=[x, x[::-1]], outputs_info=h0, non_sequences=w)
    # an array mit-sot whose output is read at its last two entries only: a ring of 4 rows
    ms = vg.scan(lambda a, b: a * 0.5 + b, outputs_info=dict(initial=s0, taps=[-3, -1]),
                 n_steps=x.shape[0])
    cols = vg.scan(lambda c: c * 2.0, sequences=x.T)  # rows of a transpose: copied once
    return [h0, x, w, s0], [hs, hs[-1], ms[-2:], cols[-1], cols]


@pytest.mark.parametrize("steps", [1, 2, 5])
def test_array_states_are_computed_into_their_rows(steps):
    inputs, outputs = array_program()
    g = rng(10 + steps)
    arrays = [g.normal(size=4), g.normal(size=(steps, 4)), g.normal(size=(4, 4)) * 0.3,
              g.normal(size=(3, 4))]
    compare_backend(inputs, outputs, [a.astype("float32") for a in arrays])
    f, _ = compile_pair(inputs, outputs)
    text = str(f.program)
    assert "computed straight into their rows: state0" in text, text


def test_the_last_entry_of_no_steps_is_an_index_error():
    inputs, outputs = array_program()
    g = rng(9)
    arrays = [g.normal(size=4), np.zeros((0, 4)), g.normal(size=(4, 4)), g.normal(size=(3, 4))]
    expect_error(inputs, outputs, [a.astype("float32") for a in arrays], IndexError,
                 "Subtensor")


def test_a_state_kept_by_its_last_entries_holds_no_trace():
    x0 = vg.tensor("x0", shape=(None,), dtype="float64")
    w = vg.tensor("w", shape=(None, None), dtype="float64")
    x = vg.tensor("x", shape=(None, None), dtype="float64")
    last = vg.scan(lambda x_t, h, w: vg.tanh(h @ w + x_t), sequences=x, outputs_info=x0,
                   non_sequences=w)[-1]
    f = vg.compile([x0, w, x], last)
    (scan,) = _scans(f)
    assert scan.node.op.layout.keep == (2,)
    assert scan.loop.rings == ((0, 2),)
    assert "rings of 2 rows for" in str(f.program)
    # two rows of 64 kept and a ring of two, whatever the steps: no (T + 1, 64) trace
    for t in (10, 10_000):
        assert f.program.peak_bytes([(64,), (64, 64), (t, 64)]) <= 6 * 64 * 8
    g = rng(3)
    compare_backend([x0, w, x], last, [g.normal(size=64), g.normal(size=(64, 64)) * 0.1,
                                       g.normal(size=(50, 64))])


@pytest.mark.parametrize("steps", [0, 1, 4])
def test_nit_sot_kept_by_its_last_entries(steps):
    x = vg.tensor("x", shape=(None, 2), dtype="float64")
    a0 = vg.tensor("a0", shape=(2,), dtype="float64")
    _, ys = vg.scan(lambda x_t, a: [a * 0.5 + x_t, vg.exp(a) * x_t], sequences=x,
                    outputs_info=[a0, None])
    inputs, outputs = [x, a0], [ys[-2:], ys[-1:]]
    g = rng(steps)
    compare_backend(inputs, outputs, [g.normal(size=(steps, 2)), g.normal(size=2)])
    f, _ = compile_pair(inputs, outputs)
    (scan,) = _scans(f)
    assert scan.node.op.layout.keep[-1] == 2


def test_the_gradient_of_a_loop_keeps_no_accumulator_trace():
    h0 = vg.tensor("h0", shape=(None,), dtype="float64")
    x = vg.tensor("x", shape=(None, None), dtype="float64")
    w = vg.tensor("w", shape=(None, None), dtype="float64")
    hs = vg.scan(lambda x_t, h: vg.tanh(h @ w + x_t), sequences=x, outputs_info=h0)
    loss = vg.mean(hs**2)
    grads = vg.grad(loss, [h0, x, w])
    f = vg.compile([h0, x, w], [loss, *grads])
    t, h = 500, 32
    peak = f.program.peak_bytes([(h,), (t, h), (h, h)])
    assert peak < 12 * t * h * 8, peak  # O(T*H), not O(T*H^2) = 500 * 32 * 32 * 8
    g = rng(4)
    compare_backend([h0, x, w], [loss, *grads], [g.normal(size=8) * 0.1,
                                                 g.normal(size=(6, 8)),
                                                 g.normal(size=(8, 8)) * 0.3])


def test_a_loop_of_no_step_collects_rows_of_the_shape_its_inputs_give():
    """A gradient through a loop of no step, every length unknown until called: the collected
    rows' lengths come from the inputs' (the x-gradient has x's shape; it was (0, 0), which
    the gradient's sum to x's shape refused)."""
    h0 = vg.tensor("h0", shape=(None,), dtype="float64")
    x = vg.tensor("x", shape=(None, None), dtype="float64")
    w = vg.tensor("w", shape=(None, None), dtype="float64")
    hs = vg.scan(lambda x_t, h: vg.tanh(h @ w + x_t), sequences=x, outputs_info=h0)
    tails = vg.scan(lambda x_t: x_t[1:] * 2, sequences=x)
    grads = vg.grad(vg.sum(hs**2), [h0, x, w])
    g = rng(5)
    for t in (0, 2):
        got = compare_backend([h0, x, w], [*grads, tails],
                              [g.normal(size=4), g.normal(size=(t, 4)), g.normal(size=(4, 4))])
        assert got[1].shape == (t, 4) and got[3].shape == (t, 3)


@functools.cache
def until_program():
    x0, n = vg.scalar("x0"), vg.scalar("n", dtype="int64")
    v = vg.tensor("v", shape=(None,))
    xs = vg.scan(lambda x: (x * 2, vg.until(x * 2 > 100)), outputs_info=x0, n_steps=n)
    hs, ss = vg.scan(lambda h: ([h * 1.5 + 0.1, vg.sum(h)], vg.until(vg.sum(h * h) > 50.0)),
                     outputs_info=[v, None], n_steps=n)
    return [x0, n, v], [xs, hs, ss, ss[-2:], hs[-1] * 2]


@pytest.mark.parametrize("x0, n, scale", [(3.0, 50, 1.0), (3.0, 2, 1.0), (200.0, 50, 10.0),
                                          (3.0, 1, 1.0), (0.5, 40, 0.1)])
def test_loops_that_stop_early(x0, n, scale):
    inputs, outputs = until_program()
    got = compare_backend(inputs, outputs, [np.float64(x0), np.int64(n), np.ones(3) * scale])
    assert got[0].shape[0] <= n and got[1].shape[0] == got[2].shape[0] <= n
    assert "until" in str(compile_pair(inputs, outputs)[0].program)


def test_a_state_updated_in_place_lives_in_one_row():
    """A gradient's accumulator of a bias (its last value alone is read): the backward body
    adds into its previous value (inplace: that value is dead after the step) and the loop
    keeps one row for it. (Static lengths prove that the sum keeps the state's shape: a state
    of run-time length is not overwritten, the loop checks its shape after the step.)"""
    x = vg.tensor("x", shape=(None, 5), dtype="float64")
    h0 = vg.tensor("h0", shape=(5,), dtype="float64")
    b = vg.tensor("b", shape=(5,), dtype="float64")
    hs = vg.scan(lambda x_t, h: vg.tanh(h * 0.5 + x_t + b), sequences=x, outputs_info=h0)
    inputs, outputs = [x, h0, b], vg.grad(vg.sum(hs**2), [b, h0])
    g = rng(8)
    for steps in (0, 1, 6):
        compare_backend(inputs, outputs, [g.normal(size=(steps, 5)), g.normal(size=5),
                                          g.normal(size=5)])
    f, _ = compile_pair(inputs, outputs)
    backward = [s for s in _scans(f) if s.loop.in_place]
    assert backward, str(f.program)
    # (both states: the bias accumulator and the carry, one fused body step writing both)
    in_place = backward[0].loop.in_place
    assert in_place
    for q in in_place:
        assert (q, 1) in backward[0].loop.rings
    line = next(t for t in str(f.program).splitlines() if "updated in place: " in t)
    assert all(f"state{q} (" in line.split("updated in place: ")[1] for q in in_place)
    body = backward[0].node.op.fgraph
    assert body.dedup_nodes is False and any(n.op.destroy_map for n in body.toposort())


def test_nested_loops_and_a_loop_inside_an_op_from_graph():
    """A loop in a loop's body (inline in the outer body, its own temporaries taken again
    every outer step) and a loop inside an OpFromGraph's function."""
    x = vg.tensor("x", shape=(None, None), dtype="float64")
    s0 = vg.tensor("s0", shape=(None,), dtype="float64")

    def row_step(row, acc):
        inner = vg.scan(lambda v, c: c * 0.5 + v, sequences=row, outputs_info=vg.as_tensor(0.0))
        return acc + inner[-1] + vg.sum(inner * row)

    outer = vg.scan(row_step, sequences=x, outputs_info=s0[0])
    r = vg.tensor("r", shape=(None,), dtype="float64")
    cum = vg.OpFromGraph([r], [vg.scan(lambda v, c: c + v * v, sequences=r,
                                       outputs_info=vg.as_tensor(0.0))])
    inputs, outputs = [x, s0], [outer, cum(s0), cum(s0[::-1])]
    g = rng(11)
    for rows in (1, 4):
        compare_backend(inputs, outputs, [g.normal(size=(rows, 5)), g.normal(size=3)])
    f, _ = compile_pair(inputs, outputs)
    assert len(_scans(f)) == 1 and "def sub" in f.source()


def test_outputs_given_as_views_and_traces_in_planned_storage():
    """The rnn gradient's x-gradient is a view of a product the call allocates for it
    (returned as it is, owned by the caller, never the workspace's), and the backward loop
    collects its factor into the storage the plan gave it, allocated before the loop (its
    rows' shape is the inputs' lengths'), also where that storage is a workspace slot no
    earlier step used (the w-gradient alone): results match the reference, and a second call
    leaves the first call's results as they were."""
    names = ("h0", "x", "w", "u", "b")
    h0, x, w, u, b = (vg.tensor(n, shape=(None,) * d, dtype="float64")
                      for n, d in zip(names, (1, 2, 2, 2, 1)))
    hs = vg.scan(lambda x_t, h: vg.tanh(h @ w + x_t @ u + b), sequences=x, outputs_info=h0)
    loss = vg.mean(hs ** 2)
    inputs, outputs = [h0, x, w, u, b], [loss, *vg.grad(loss, [h0, x, w])]
    g = rng(3)
    values = [g.normal(size=4) * 0.1, g.normal(size=(6, 4)), g.normal(size=(4, 4)) / 3,
              g.normal(size=(4, 4)) / 3, g.normal(size=4) * 0.1]
    first = compare_backend(inputs, outputs, values)
    f, _ = compile_pair(inputs, outputs)
    dx = f.program.outputs[2]
    assert dx not in f.program.returned_copies()
    assert "view0(" in f.source() and "tr0 = b" in f.source()  # (the trace in a planned slot)
    kept = [np.array(r, copy=True) for r in first]
    again = f(*[v * 2 for v in values])
    assert not np.shares_memory(again[2], first[2])
    for k, r in zip(kept, first):
        np.testing.assert_array_equal(k, r)
    only_w = [loss, vg.grad(loss, w)]
    compare_backend(inputs, only_w, values)
    f, _ = compile_pair(inputs, only_w)
    assert "tr0 = b" in f.source() and "tr0 = np.empty" not in f.source()


def test_a_trace_is_returned_without_its_initial_row_and_no_copy():
    """`scan(...)` returns the trace after its initial entry, a view leaving out that row: the
    call allocates the trace for the caller and returns the view as it is (no copy of every
    step's row, no trace in the workspace); two calls return arrays of their own. An output
    sharing the trace with another is copied."""
    h0 = vg.tensor("h0", shape=(None,), dtype="float32")
    x = vg.tensor("x", shape=(None, None), dtype="float32")
    w = vg.tensor("w", shape=(None, None), dtype="float32")
    hs = vg.scan(lambda x_t, h: vg.tanh(h @ w + x_t), sequences=x, outputs_info=h0)
    g = rng(21)
    for outputs, given in [([hs], True), ([hs, hs[-1]], False)]:
        f, _ = compile_pair([h0, x, w], outputs)
        assert (f.program.outputs[0] not in f.program.returned_copies()) == given
        arrays = [g.normal(size=(4,)), g.normal(size=(5, 4)), g.normal(size=(4, 4)) * 0.3]
        arrays = [a.astype("float32") for a in arrays]
        first = compare_backend([h0, x, w], outputs, arrays)
        kept = np.array(first[0], copy=True)
        again = f(*[a * 2 for a in arrays])
        again = again if isinstance(again, list) else [again]
        assert not np.shares_memory(again[0], first[0])
        np.testing.assert_array_equal(kept, first[0])


def test_the_row_a_step_writes_is_its_own_to_llvm():
    """A vector recurrence whose body reads the state's previous row and writes the next one
    of the same trace: the written row goes through own_row, so LLVM checks the overlap of the
    step's two rows, not of the whole trace's ranges before the loop (which always overlap:
    every vectorized loop of the body then ran scalar, a tanh at 7 ns per element)."""
    h0 = vg.tensor("h0", shape=(None,), dtype="float64")
    x = vg.tensor("x", shape=(None, None), dtype="float64")
    hs = vg.scan(lambda x_t, h: vg.tanh(h * 0.9 + x_t), sequences=x, outputs_info=h0)
    f, _ = compile_pair([h0, x], [hs])
    assert "own_row0(" in f.source()
    g = rng(22)
    for steps, width in [(0, 3), (1, 1), (7, 33)]:
        compare_backend([h0, x], [hs], [g.normal(size=width), g.normal(size=(steps, width))])


@functools.cache
def row_program():
    h0 = vg.tensor("h0", shape=(None,), dtype="float64")
    x = vg.tensor("x", shape=(None, None), dtype="float64")
    w = vg.tensor("w", shape=(None, None), dtype="float64")

    def step(x_t, h):
        # the state a product's (1, n) result seen as its n-vector, and two collected
        # outputs: an elementwise result and another product's vector (pushed out of the
        # loop: the loop collects the previous state, copied, for one product after it)
        return h @ w.T, vg.tanh(h + x_t), h @ w
    h, a, p = vg.scan(step, sequences=x, outputs_info=[h0, None, None])
    return [h0, x, w], [h, a, p]


@pytest.mark.parametrize("steps", [0, 1, 4])
def test_collected_outputs_and_product_views_are_computed_into_their_rows(steps):
    """Collected (nit-sot) outputs whose trace is allocated before the loop, and states that
    are a view of a product's result, are computed straight into their rows (the backward
    loop of an rnn gradient copied three rows per step: its product, the pre-activation
    gradient it collects, and a chain of identity sums of it)."""
    inputs, outputs = row_program()
    g = rng(30 + steps)
    compare_backend(inputs, outputs, [g.normal(size=3), g.normal(size=(steps, 3)),
                                      g.normal(size=(3, 3)) * 0.5])
    f, _ = compile_pair(inputs, outputs)
    assert "computed straight into their rows: state0 (b4), output1 (b5)" in str(f.program)
    loop = f.source()[f.source().index("for t"):f.source().index("return")]
    assert loop.count("copy_into") == 1, loop  # (the previous state's, collected)
