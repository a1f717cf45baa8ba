"""The scheduler's decisions, read from the Program (no backend runs here): row groups and
element reads. Backends' results for them are tested in tests/cpu_backend and tests/cuda."""

from __future__ import annotations

import verglas as vg
from verglas.function import _optimize
from verglas.ops.indexing import Subtensor
from verglas.schedule import lower
from verglas.schedule.program import Step


def program_of(inputs, outputs):
    return lower(_optimize(inputs, outputs, "fast_run"), tuple(v.name for v in inputs))


def test_softmax_is_one_row_group_with_row_local_buffers():
    x = vg.tensor("x", shape=(None, None), dtype="float32")
    program = program_of([x], [vg.softmax(x, axis=1)])
    (group,) = program.groups
    assert [type(u) for u in program.units()] == [type(group)]
    assert program.n_kernels() == 1
    # exp(x - max) is one row, the max and the sum one value per row: no storage of their own
    assert sorted(group.local.values()).count("row") == 1
    assert all(program.slots[b] is None for b in group.local)
    assert group.riding  # the sum accumulates in exp's loop
    text = str(program)
    assert "one loop over x.shape[0] rows  [pooled when large" in text and "[one row]" in text


def test_logsumexp_inlines_the_exp_into_the_sum():
    x = vg.tensor("x", shape=(None, None), dtype="float64")
    program = program_of([x], [vg.logsumexp(x, axis=1)])
    (group,) = program.groups
    assert group.inlined and not group.riding
    assert "(in the loop of" in str(program)


def test_what_a_group_touches_lives_through_it():
    """Members run interleaved row by row: no storage is handed on inside a group."""
    x = vg.tensor("x", shape=(None, None), dtype="float32")
    program = program_of([x], [vg.softmax(x, axis=1), vg.logsumexp(x, axis=1) * 2])
    for group in program.groups:
        for b in group.buffers():
            assert program.live[b][1] >= group.last


def test_element_reads_are_neither_steps_nor_buffers():
    """A sum of N terms a[i] * sin(x + i) is one elementwise step reading a[0]...a[N-1] inside
    its loop: the Program grows linearly and by few steps, whatever the spelling (the
    Subtensor and DimShuffle of each coefficient were two steps and a fused-loop input each)."""
    x = vg.tensor("x", shape=(None,), dtype="float64")
    a = vg.tensor("a", shape=(None,), dtype="float64")
    m = vg.tensor("m", shape=(None, 3), dtype="float64")
    for n in (10, 100):
        acc = a[0] * vg.sin(x)
        for i in range(1, n):
            acc = acc + a[i] * vg.sin(x + i) + m[i % 2, -1]
        program = program_of([x, a, m], [acc])
        steps = [s for s in program.steps if isinstance(s, Step)]
        assert not any(isinstance(s.node.op, Subtensor) for s in steps)
        assert sum(len(s.element_reads) for s in steps) >= n  # each coefficient, in a loop
        assert len(steps) <= 2 + n // 8  # fused steps only (the fusion's input limit splits)
        # what the loops read: x, a, m, constants and earlier steps' results, whatever n
        made = {b for t in steps for b in t.outputs}
        roots = {b.id for b in program.buffers if b.kind in ("input", "constant")}
        assert all(set(s.inputs) <= made | roots for s in steps)
        assert "a[3]" in str(program) and "m[1, -1]" in str(program)


def test_an_element_read_kept_where_a_non_elementwise_step_uses_it():
    x = vg.tensor("x", shape=(None,), dtype="float64")
    out = vg.sum(x[2] * x) + x[1]
    program = program_of([x], [out, x[0]])  # x[0] is an output: a view step of its own
    assert any("Subtensor" in str(s.node.op) for s in program.steps)


def test_an_op_many_steps_run_is_one_shared_kernel():
    x = vg.tensor("x", shape=(None,), dtype="float64")
    a = vg.tensor("a", shape=(100,), dtype="float64")
    acc = a[0] * vg.sin(x)
    for i in range(1, 100):
        acc = acc + a[i] * vg.sin(x + i)
    program = program_of([x, a], [acc, vg.sum(acc) * 0.5])
    shared = program.shared_kernels()
    assert shared and all(n >= 2 for n in shared.values())
    steps = [s for s in program.steps if s.node.op in shared]
    assert len(steps) == sum(shared.values())  # every use of a shared op, outside row groups
    assert all(s.node.outputs[0].ndim >= 1 for s in steps)
    text = str(program)
    assert text.count("[kernel k0]") == list(shared.values())[0]
    assert "one kernel for the" in text


def _layernorm(x, g, b):
    m = vg.mean(x, axis=-1, keepdims=True)
    d = x - m
    return d / vg.sqrt(vg.mean(d * d, axis=-1, keepdims=True) + 1e-5) * g + b


def test_a_checked_scale_and_shift_join_the_layernorm_rows():
    """gamma's length is known only at run time: the specialized variant checks that nothing
    broadcasts at the scale-and-shift step, so that step joins the row group (one pass); the
    general variant, which broadcasts, keeps it out. The views of gamma and beta run first."""
    x = vg.tensor("x", shape=(None, None, None), dtype="float32")
    g, b = (vg.tensor(n, shape=(None,), dtype="float32") for n in "gb")
    program = program_of([x, g, b], [_layernorm(x, g, b)])
    (group,) = program.groups
    last = program.steps[-1]
    assert last.index in program.broadcast_checks and group.last == last.index
    assert sum(type(s.node.op).__name__ == "Sum" for s in group.steps) == 2
    general = program.general()
    (group,) = general.groups
    assert group.last < last.index
    assert program.general().general().groups == general.groups


def test_a_layernorm_of_a_residual_sum_is_one_group():
    """The mean's count of `x + y` (both of run-time lengths) is computed from the inputs'
    lengths, first, not read from the sum between its two reductions."""
    x, y = (vg.tensor(n, shape=(None, None, None), dtype="float32") for n in "xy")
    g, b = (vg.tensor(n, shape=(None,), dtype="float32") for n in "gb")
    program = program_of([x, y, g, b], [_layernorm(x + y, g, b)])
    (group,) = program.groups
    assert sum(type(s.node.op).__name__ == "Sum" for s in group.steps) == 2
    assert group.last == program.steps[-1].index


def rnn_gradient_program():
    names = ("h0", "x", "w", "u", "b")
    h0, x, w, u, b = (vg.tensor(n, shape=(None,) * d, dtype="float64")
                      for n, d in zip(names, (1, 2, 2, 2, 1)))
    hs = vg.scan(lambda x_t, h: vg.tanh(h @ w + x_t @ u + b), sequences=x, outputs_info=h0)
    loss = vg.mean(hs ** 2)
    return program_of([h0, x, w, u, b], [loss, *vg.grad(loss, [h0, x, w])])


def test_checked_sums_and_adds_need_no_storage_of_their_own():
    """The rnn gradient's factor reaches its two products through SumToShapes and the weight
    gradient adds a product to zeros: in the specialized variant (nothing broadcast, checked)
    each SumToShape shares its input's array or takes it over, and the add writes over the
    product; the general variant keeps storage for each."""
    program = rnn_gradient_program()
    for step in program.steps:
        op = type(step.node.op).__name__
        if op == "SumToShape" and step.node.inputs[0].ndim:
            (o,), g = step.outputs, step.inputs[0]
            assert step.index in program.adopted
            assert program.slots[o] is None or program.slots[o] == program.slots[g]
    general = program.general()
    assert len(set(general.slots) - {None}) > len(set(program.slots) - {None})


def test_rnn_gradient_storage_is_the_trace_and_the_gradients():
    """Program.peak_bytes of the rnn gradient: within 1.5x of the forward trace plus the
    gradients' own size (issue 15), O(T*H + H^2) at any T."""
    program = rnn_gradient_program()
    hidden = 64
    for steps in (100, 3000):
        shapes = [(hidden,), (steps, hidden), (hidden, hidden), (hidden, hidden), (hidden,)]
        floor = ((steps + 1) * hidden + hidden + steps * hidden + hidden * hidden) * 8
        assert program.peak_bytes(shapes) <= 1.5 * floor


def test_an_output_view_of_a_whole_temporary_is_given_away():
    """`(x @ w)[::-1]` is returned as the view it is (the call allocates the product afresh for
    it); a view of an input, a part of a temporary, or a temporary two outputs share, is
    returned as a copy (and peak_bytes counts the copy)."""
    x = vg.tensor("x", shape=(None, None), dtype="float64")
    w = vg.tensor("w", shape=(None, None), dtype="float64")
    product = x @ w
    program = program_of([x, w], [product[::-1]])
    (out,) = program.outputs
    assert program.returned_copies() == ()
    assert program.storage_of(out).is_output and program.storage_of(out).kind == "temp"
    shapes = [(30, 4), (4, 5)]
    assert program.peak_bytes(shapes) == 30 * 5 * 8
    for outputs in ([x[::-1]], [product[:3]], [product[::-1], product.T]):
        program = program_of([x, w], outputs)
        assert program.returned_copies(), outputs
    program = program_of([x, w], [x[::-1]])
    assert program.peak_bytes(shapes) == 30 * 4 * 8  # (the copy of the input's rows)


def test_a_shape_that_holds_an_array_constant_prints():
    """Seed 20846: the length of a loop that stops early is an expression of its initial state,
    an array constant; printing the Program raised (`.item()` of 35 values)."""
    import numpy as np

    x = vg.tensor("x", shape=(None, 3), dtype="int64")
    trace = vg.scan(lambda s, h: (h + s, vg.until(vg.all(vg.eq(h + s, h)))), sequences=[x],
                    outputs_info=np.array([1, 2, 3]))
    assert "const(3,)" in str(program_of([x], [trace]))
