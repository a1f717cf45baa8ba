"""The scheduler's thread-pool decisions (schedule/pools.py), read from the Program: which
loops a pool may share out and the work each element costs. The CPU backend's code for them
is tested in tests/cpu_backend/test_pooled_elemwise.py."""

from __future__ import annotations

import verglas as vg
from tests.schedule.test_scheduler import program_of
from verglas.ops.elemwise import Elemwise


def _elementwise(program):
    return {s.index for s in program.steps
            if isinstance(s.node.op, Elemwise) and s.node.outputs[0].ndim >= 1}


def test_elementwise_loops_and_row_groups_are_pooled_with_their_work():
    x = vg.tensor("x", shape=(None, None), dtype="float32")
    v = vg.tensor("v", shape=(None,), dtype="float32")
    program = program_of([x, v], [vg.tanh(v) * 2 + 1, vg.softmax(x, axis=1), v * 3])
    (group,) = program.groups
    assert program.pool_work(group.first) == 8
    works = sorted(program.pool_work(k) for k in _elementwise(program)
                   if k not in {s.index for s in group.steps})
    assert works == [1, 10]  # v * 3: one cheap op; tanh(v) * 2 + 1: tanh (8) and two more
    text = str(program)
    assert "rows  [pooled when large: 1 work per element]:" in text
    assert "[pooled when large: 1.25 work per element]" in text


def test_a_program_with_a_product_pools_only_its_row_groups():
    """OpenBLAS's threads hold the other cores after a product (pools.py), in the program and
    in its inner graphs."""
    x = vg.tensor("x", shape=(None, None), dtype="float32")
    program = program_of([x], [vg.tanh(x @ x) + 1, vg.exp(x) * 2, vg.softmax(x, axis=1)])
    assert [k for k, _ in program.pooled] == [g.first for g in program.groups]
    inner_x = vg.tensor("ix", shape=(None, None), dtype="float32")
    layer = vg.OpFromGraph([inner_x], [inner_x @ inner_x])
    program = program_of([x], [layer(x) + 1, vg.exp(x) * 2])
    assert program.pooled == ()


def test_a_loop_body_keeps_its_elementwise_steps_on_one_thread():
    x = vg.tensor("x", shape=(None, None), dtype="float64")
    h0 = vg.tensor("h0", shape=(None,), dtype="float64")
    hs = vg.scan(lambda x_t, h: vg.tanh(h * 0.5 + x_t), sequences=x, outputs_info=h0)
    program = program_of([x, h0], [hs])
    (scan_step,) = [s for s in program.steps if s.sub_program is not None]
    body = scan_step.sub_program
    assert _elementwise(body) and body.pooled == ()


def test_the_general_variant_pools_no_loop_that_broadcasts_at_run_time():
    x = vg.tensor("x", shape=(None, None), dtype="float64")
    v = vg.tensor("v", shape=(None,), dtype="float64")
    program = program_of([x, v], [vg.exp(x) + v, vg.exp(v) * 2])
    (checked,) = program.broadcast_checks
    assert program.pool_work(checked) == 9
    general = program.general()
    assert general.pool_work(checked) is None
    assert sorted(general.pooled) == sorted(p for p in program.pooled if p[0] != checked)


def test_whole_array_reductions_are_pooled_and_partial_ones_are_not():
    """A reduction over every axis splits into parts (pools.py); its work counts the
    elementwise step it computes in its loop. One over some axes keeps its loop."""
    x = vg.tensor("x", shape=(None, None), dtype="float32")
    program = program_of([x], [x.sum(), vg.sum(vg.exp(x)), x.max(axis=0)])
    reductions = [s for s in program.steps if type(s.node.op).__name__ in ("Sum", "Max")]
    assert [program.pool_work(s.index) for s in reductions] == [1, 9, None]  # exp: 8 + 1
    product = program_of([x], [(x @ x).sum()])
    assert product.pooled == ()


def test_the_rows_of_an_argmax_along_one_axis_are_pooled():
    x = vg.tensor("x", shape=(None, None), dtype="float32")
    v = vg.tensor("v", shape=(None,), dtype="float32")
    program = program_of([x, v], [x.argmax(axis=1), vg.argmin(x, axis=0), v.argmax(),
                                  x.argmax()])
    works = [program.pool_work(s.index) for s in program.steps
             if type(s.node.op).__name__ in ("Argmax", "Argmin")]
    assert works == [1, 1, None, None]  # (one row, or a whole flattened array: no rows)


def test_a_reduction_over_its_last_axes_shares_out_its_first():
    """Pairwise distances: a sum over the last axis of a map that broadcasts (no row group);
    each output element is reduced on its own, so the rows of the first axis are pooled. A
    column sum accumulates across rows (not pooled), and so does nothing in a program with a
    product."""
    a = vg.tensor("a", shape=(None, None), dtype="float32")
    b = vg.tensor("b", shape=(None, None), dtype="float32")
    dist = ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)
    program = program_of([a, b], [dist, a.sum(axis=0)])
    (reduction,) = [s for s in program.steps if s.node.outputs[0] is not None
                    and type(s.node.op).__name__ == "Sum" and s.node.op.axis == (2,)]
    assert program.pool_work(reduction.index) == 3  # one eighth and the map's two
    (column,) = [s for s in program.steps if type(s.node.op).__name__ == "Sum"
                 and s.node.op.axis == (0,)]
    assert program.pool_work(column.index) is None
    assert "Sum{axis=(2,)}(b4)  [pooled when large: 0.375 work per element]" in str(program)
    assert program_of([a, b], [dist, a @ b.T]).pool_work(reduction.index) is None
