"""The scheduler's repeats (schedule/repeats.py): runs of identical blocks of steps that run as
one loop, read from the Program, and the CPU's results for them against numpy."""

from __future__ import annotations

import numpy as np
import pytest

import verglas as vg
from tests.schedule.test_scheduler import program_of


def _rounds(x, n, scale=None):
    """n rounds of x = tanh(x) + max(x) (times scale[i] when given): one reduction and one
    elementwise step each, nothing fuses across the reduction."""
    values = []
    for i in range(n):
        x = vg.tanh(x) + vg.max(x) if scale is None else vg.tanh(x) * scale[i] + vg.max(x)
        values.append(x)
    return values


def _np_rounds(x, n, scale=None):
    values = []
    for i in range(n):
        x = np.tanh(x) + np.max(x) if scale is None else np.tanh(x) * scale[i] + np.max(x)
        values.append(x)
    return values


def test_rounds_of_one_block_are_one_loop():
    x = vg.tensor("x", shape=(None,), dtype="float64")
    program = program_of([x], [_rounds(x, 10)[-1]])
    (rep,) = program.repeats
    assert (rep.period, rep.count) == (3, 9)  # the first round reads x, not a carried value
    (carried,) = rep.carried
    assert program.buffers[carried[0]].kind == "temp"
    # the units: the first round's steps, then the loop
    assert [type(u).__name__ for u in program.units()][-1] == "Repeat"
    text = str(program)
    assert "one loop of 9 iterations of steps 3-5" in text and "iterations 2-9" in text
    assert not program.shared_kernels()  # the body's code is there once: nothing to share
    assert program.n_kernels() == 2 + 2  # the first round and the body: max and elementwise


def test_a_block_read_later_ends_the_loop_before_it():
    x = vg.tensor("x", shape=(None,), dtype="float64")
    rounds = _rounds(x, 12)
    program = program_of([x], [rounds[-1], rounds[6]])  # round 6's value is an output
    read_later = {b for b in program.outputs}
    for rep in program.repeats:
        middle = program.steps[rep.first:rep.last_step + 1 - rep.period]
        assert not read_later & {b for s in middle for b in s.outputs}
    got = vg.compile([x], [rounds[-1], rounds[6]])(xv := np.linspace(-1, 1, 7))
    want = _np_rounds(xv, 12)
    np.testing.assert_allclose(got[0], want[-1])
    np.testing.assert_allclose(got[1], want[6])


def test_constants_that_differ_per_block_are_read_by_iteration():
    x = vg.tensor("x", shape=(None,), dtype="float64")
    scale = [0.55 + 0.1 * i for i in range(10)]  # (a 1.0 would simplify away)
    y = _rounds(x, 10, scale)[-1]
    program = program_of([x], [y])
    (rep,) = program.repeats
    ((_, _, consts),) = rep.varying
    assert len(consts) == rep.count and len(set(consts)) == rep.count
    f = vg.compile([x], y)
    assert "for rp0 in range(9):" in f.source()
    xv = np.array([-2.0, -0.0, 0.5, np.inf, 3.0])
    np.testing.assert_allclose(f(xv), _np_rounds(xv, 10, scale)[-1])


def test_scalar_inputs_that_differ_per_block_and_empty_arrays():
    x = vg.tensor("x", shape=(None,), dtype="float32")
    a = [vg.scalar(f"a{i}", dtype="float32") for i in range(8)]
    y = x
    for ai in a:  # each round a reduction, so nothing fuses across rounds
        y = vg.exp(-y * y) * ai + vg.sum(y)
    f = vg.compile([x, *a], y)
    assert f.program.repeats and f.program.repeats[0].varying
    av = [np.float32(0.1 * i - 0.3) for i in range(8)]
    for xv in (np.linspace(-1, 1, 9, dtype="float32"), np.zeros(0, "float32"),
               np.linspace(-1, 1, 9, dtype="float32")[::-2]):
        want = xv
        for ai in av:
            want = np.exp(-want * want) * ai + np.sum(want)
        np.testing.assert_allclose(f(xv, *av), want, rtol=2e-5, atol=1e-6)


def test_ping_pong_storage_is_left_unrolled_and_right():
    # layers whose outputs alternate between two slots: the memory plan differs from block to
    # block, so no loop (one block's storage would not serve every iteration)
    x = vg.tensor("x", shape=(None, 4), dtype="float64")
    w = vg.tensor("w", shape=(4, 4), dtype="float64")
    h = x
    for _ in range(6):
        h = vg.tanh(h @ w) + h
    program = program_of([x, w], [h])
    for rep in program.repeats:
        body = program.repeat_body(rep)
        for k in range(1, rep.count):
            block = program.steps[rep.first + k * rep.period:rep.first + (k + 1) * rep.period]
            assert [program.slots[b] for s in block for b in s.outputs] == \
                [program.slots[b] for s in body for b in s.outputs]
    xv, wv = np.random.default_rng(0).standard_normal((2, 4, 4))
    want = xv
    for _ in range(6):
        want = np.tanh(want @ wv) + want
    np.testing.assert_allclose(vg.compile([x, w], h)(xv, wv), want)


def test_element_reads_that_move_by_block_are_one_loop():
    # big_graph as users spell it: a[i] * sin(x + i). Each block of fused terms reads the
    # next 30 coefficients: the body reads a[i] of a[30 * k:] in iteration k
    x = vg.tensor("x", shape=(None,), dtype="float64")
    a = vg.tensor("a", shape=(None,), dtype="float64")  # its length known only at run time
    acc = a[0] * vg.sin(x)
    for i in range(1, 200):
        acc = acc + a[i] * vg.sin(x + i)
    f = vg.compile([x, a], acc)
    (rep,) = f.program.repeats
    assert rep.shifted and rep.shifted[0][1] > 0
    assert "per iteration" in str(f.program)
    g = np.random.default_rng(4)
    xv, av = g.standard_normal(300), g.standard_normal(200)
    want = av[0] * np.sin(xv)
    for i in range(1, 200):
        want = want + av[i] * np.sin(xv + i)
    np.testing.assert_allclose(f(xv, av), want, rtol=1e-12, atol=1e-12)
    with pytest.raises(IndexError):  # the last iterations' reads are out of bounds
        f(xv, av[:150])


def test_a_stack_of_one_op_from_graph_is_one_call_site():
    """Twenty uses of one OpFromGraph layer, each on the last one's result: one loop around
    one call (compiled once, whatever the uses), though the layer's broadcasting leaves the
    result's shape open: only the layer, which checks its inputs, reads the carried value."""
    h = vg.tensor("h", shape=(None, None), dtype="float64")
    w = vg.tensor("w", shape=(None, None), dtype="float64")
    b = vg.tensor("b", shape=(None,), dtype="float64")
    hh, ww, bb = (v.type.make_variable() for v in (h, w, b))
    layer = vg.OpFromGraph([hh, ww, bb], [hh + vg.tanh(hh @ ww + bb)])
    x = h
    for _ in range(20):
        x = layer(x, w, b)
    f = vg.compile([h, w, b], x)
    (rep,) = f.program.repeats
    assert rep.count == 20 and rep.unproven
    text = f.source()
    assert text[text.index("def program("):].count("sub0, (") == 1
    g = np.random.default_rng(0)
    hv, wv, bv = g.normal(size=(4, 3)), g.normal(size=(3, 3)) * 0.3, g.normal(size=3)
    want = hv
    for _ in range(20):
        want = want + np.tanh(want @ wv + bv)
    np.testing.assert_allclose(f(hv, wv, bv), want, rtol=1e-12)
    with pytest.raises(ValueError):  # the layer still checks what it is given
        f(hv, g.normal(size=(2, 2)), bv)
