"""Row fusion on the CPU backend against the reference: one loop over rows with row-local
buffers (one row of scratch, one value per row), elementwise producers computed inside the
reduction that alone reads them, and 1-d row views.

All cases share one program per dtype, so numba compiles each once.
"""

from __future__ import annotations

import numpy as np
import pytest

import verglas as vg
from tests.cpu_backend.utils import (calls_in_threads, compare_backend, compile_pair,
                                     expect_error, rng)


def _outputs(x, w):
    e = vg.exp(x - vg.max(x, axis=1, keepdims=True))
    return [
        vg.softmax(x),                                   # scratch row read twice
        vg.logsumexp(x, axis=1),                         # exp inlined into the sum
        vg.sum(x * w, axis=1),                           # product inlined, broadcast row
        e,                                               # an intermediate that is an output
        vg.sum(e, axis=1, keepdims=True),
        vg.min(x * 2.0, axis=1) + vg.max(-x, axis=1),    # order keys, both directions
        vg.sum(vg.sqr(x), axis=1, keepdims=True) / vg.sum(vg.abs(x) + 1.0, axis=1,
                                                             keepdims=True),
    ]


@pytest.fixture(scope="module", params=["float32", "float64"])
def program(request):
    x = vg.tensor("x", shape=(None, None), dtype=request.param)
    w = vg.tensor("w", shape=(1, None), dtype=request.param)
    return request.param, [x, w], _outputs(x, w)


def _special(dtype, rows, cols, seed):
    g = rng(seed)
    x = g.normal(size=(rows, cols)).astype(dtype)
    if rows >= 4 and cols >= 2:
        x[1, 0] = np.nan
        x[2, :] = -np.inf
        x[3, 1] = np.inf
        x[0, 0] = -0.0
    return x


@pytest.mark.parametrize("rows,cols", [(6, 9), (1, 5), (5, 1), (0, 4), (4, 300)])
def test_row_groups_match_reference(program, rows, cols):
    dtype, inputs, outs = program
    x = _special(dtype, rows, cols, rows * 100 + cols)
    w = rng(1).normal(size=(1, cols)).astype(dtype)
    compare_backend(inputs, outs, [x, w])


def test_strided_and_negative_stride_rows(program):
    dtype, inputs, outs = program
    base = _special(dtype, 8, 10, 3)
    w = rng(2).normal(size=(1, 10)).astype(dtype)
    compare_backend(inputs, outs, [base[::-2], w])          # negative row stride
    compare_backend(inputs, outs, [base[:, ::2].T.copy().T, w[:, ::2].copy()])
    compare_backend(inputs, outs, [np.asfortranarray(base), w])


def test_long_float32_rows_stay_accurate():
    x = vg.tensor("x", shape=(None, None), dtype="float32")
    outs = [vg.sum(vg.exp(x - vg.max(x, axis=1, keepdims=True)), axis=1), vg.logsumexp(x, axis=1)]
    arr = rng(7).random((3, 200_000), dtype=np.float32)
    fast, _ = compile_pair([x], outs)
    got = fast(arr)
    a64 = arr.astype(np.float64)
    want = np.exp(a64 - a64.max(1, keepdims=True)).sum(1)
    np.testing.assert_allclose(got[0], want, rtol=1e-5)
    np.testing.assert_allclose(got[1], np.log(want) + a64.max(1), rtol=1e-6)


def test_integer_rows():
    x = vg.tensor("x", shape=(None, None), dtype="int64")
    outs = [vg.max(x, axis=1) - vg.min(x * 3, axis=1), vg.sum(x * x, axis=1, keepdims=True)]
    arr = rng(8).integers(-1000, 1000, size=(7, 11))
    compare_backend([x], outs, [arr])


def test_groups_are_formed_and_empty_rows():
    """A max over an empty row raises (numpy); the softmax family's shift takes -inf there, so
    an empty row's logsumexp is -inf and its softmax is empty (scipy, JAX)."""
    x = vg.tensor("x", shape=(None, None), dtype="float32")
    fast, _ = compile_pair([x], [vg.logsumexp(x, axis=1)])
    groups = fast.program.groups
    assert groups and max(len(g.steps) for g in groups) >= 4
    expect_error([x], [vg.max(x, axis=1) + 1], [np.zeros((3, 0), np.float32)], ValueError,
                 "Max")
    empty = np.zeros((3, 0), np.float32)
    got = compare_backend([x], [vg.logsumexp(x, axis=1), vg.softmax(x, axis=1)], [empty])
    np.testing.assert_array_equal(got[0], np.full(3, -np.inf, np.float32))
    assert got[1].shape == (3, 0)


def test_parallel_rows_under_concurrent_calls():
    """Row loops run on numba's thread pool when a thread-safe layer loads: 8 Python threads
    calling one Function at once must each get their own scratch rows (inputs large enough
    for the pool, and small ones that run on the calling thread)."""

    from verglas.cpu_backend.parallel_for import SERIAL_WORK
    from verglas.cpu_backend.threads import parallel_rows

    x = vg.tensor("x", shape=(None, None), dtype="float32")
    outs = [vg.softmax(x), vg.logsumexp(x, axis=1)]
    fast, ref = compile_pair([x], outs)
    assert ("parallel_range" in fast._runner.text) == parallel_rows()
    shapes = [(1024 + k, 40) if k % 2 else (64 + k, 33) for k in range(8)]
    assert 1025 * 40 >= SERIAL_WORK > 71 * 33
    data = [rng(k).normal(size=shape).astype("float32") for k, shape in enumerate(shapes)]
    expected = [ref(d) for d in data]
    calls_in_threads(fast, [[d] for d in data], expected, 200, rtol=2e-5, atol=1e-6)


def _nd_outputs(x, g):
    m = vg.mean(x, axis=-1, keepdims=True)
    v = vg.mean(vg.sqr(x - m), axis=-1, keepdims=True)
    return [
        vg.softmax(x, axis=-1),
        vg.logsumexp(x, axis=-1),
        (x - m) / vg.sqrt(v + 1e-5),                              # layernorm's rows
        x / vg.sqrt(vg.mean(vg.sqr(x), axis=-1, keepdims=True) + 1e-6) * g,  # rmsnorm
        vg.max(x * g, axis=-1) + vg.min(-x, axis=-1),
    ]


@pytest.fixture(scope="module", params=[3, 4])
def nd_program(request):
    ndim = request.param
    x = vg.tensor("x", shape=(None,) * ndim, dtype="float32")
    g = vg.tensor("g", shape=(1,) * (ndim - 1) + (None,), dtype="float32")
    return ndim, [x, g], _nd_outputs(x, g)


@pytest.mark.parametrize("lead,cols", [((2, 5), 9), ((1, 1), 4), ((3, 0), 6), ((2, 3), 1),
                                       ((0, 2), 3), ((2, 4), 300)])
def test_rows_of_nd_arrays_match_reference(nd_program, lead, cols):
    """Last-axis rows of 3-d and 4-d arrays are one row group over the product of the leading
    dims (the scheduler's decision, printed), with empty and size-1 dims, specials, and
    non-contiguous and negative-stride inputs (copied once into rows)."""
    ndim, inputs, outs = nd_program
    shape = (*lead, *(2,) * (ndim - 3), cols)
    x = rng(cols).normal(size=shape).astype("float32")
    if x.size >= 4 and cols >= 2:
        x.reshape(-1, cols)[0, 0] = np.nan
        x.reshape(-1, cols)[-1, 1] = np.inf
    g = rng(3).normal(size=(1,) * (ndim - 1) + (cols,)).astype("float32")
    got = compare_backend(inputs, outs, [x, g])
    assert all(out.shape == want for out, want in zip(got[:1], [shape]))
    compare_backend(inputs, outs, [x[::-1], g])
    compare_backend(inputs, outs, [np.swapaxes(np.swapaxes(x, 0, 1).copy(), 0, 1), g])


def test_nd_rows_are_one_group():
    x = vg.tensor("x", shape=(None, None, None), dtype="float32")
    fast, _ = compile_pair([x], [vg.softmax(x, axis=-1)])
    text = str(fast.program)
    assert "one loop over x.shape[0] * x.shape[1] rows" in text
    assert len(fast.program.groups) == 1 and len(fast.program.groups[0].steps) >= 4
    # layernorm: the mean's count (x.shape[2] as a float) is computed first, so both sums
    # are in one group (it used to split the group: the first mean ran alone)
    m = vg.mean(x, axis=-1, keepdims=True)
    d = x - m
    ln = d / vg.sqrt(vg.mean(d * d, axis=-1, keepdims=True) + np.float32(1e-5))
    fast, _ = compile_pair([x], [ln])
    (group,) = fast.program.groups
    assert sum(type(s.node.op).__name__ == "Sum" for s in group.steps) == 2


def test_layernorm_with_a_checked_scale_and_shift_in_the_rows():
    """The scale and shift run in the rows' loop (their length checked before it); a gamma or
    beta of length 1 broadcasts (the general variant), one of another length is numpy's
    error."""
    x = vg.tensor("x", shape=(None, None, None), dtype="float32")
    g, b = (vg.tensor(n, shape=(None,), dtype="float32") for n in "gb")
    m = vg.mean(x, axis=-1, keepdims=True)
    d = x - m
    out = d / vg.sqrt(vg.mean(d * d, axis=-1, keepdims=True) + 1e-5) * g + b
    fast, _ = compile_pair([x, g, b], [out])
    assert fast.program.groups[0].last == fast.program.steps[-1].index
    r = rng(7)
    for shape, lg, lb in [((2, 3, 5), 5, 5), ((2, 3, 5), 1, 5), ((2, 3, 5), 5, 1),
                          ((0, 3, 5), 5, 5), ((2, 3, 1), 1, 1), ((2, 3, 1), 4, 4)]:
        xs = r.normal(size=shape).astype("float32")
        compare_backend([x, g, b], [out], [xs, r.normal(size=lg).astype("float32"),
                                           r.normal(size=lb).astype("float32")])
    expect_error([x, g, b], [out], [np.ones((2, 3, 5), "float32"), np.ones(4, "float32"),
                                    np.ones(5, "float32")], ValueError, "broadcast")


def test_a_group_led_by_a_checked_step_takes_its_rows_from_what_it_reads():
    """The rows of `x + y` (both of run-time lengths) are no array's own lengths: the group
    takes them from x, checks y against them, and a y that broadcasts runs the general
    variant (the transformer's gradient failed to type: `None * None` rows)."""
    x, y = (vg.tensor(n, shape=(None, None, None), dtype="float32") for n in "xy")
    s = x + y
    out = vg.sum(s, axis=-1) + vg.max(s, axis=-1)
    fast, _ = compile_pair([x, y], [out])
    (group,) = fast.program.groups
    assert group.first == 0 and 0 in fast.program.broadcast_checks
    r = rng(8)
    for xs, ys in [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (1, 3, 4)), ((2, 3, 4), (2, 3, 1)),
                   ((0, 3, 4), (0, 3, 4)), ((2, 1, 4), (2, 5, 4))]:
        compare_backend([x, y], [out], [r.normal(size=xs).astype("float32"),
                                        r.normal(size=ys).astype("float32")])
    expect_error([x, y], [out], [np.ones((2, 3, 4), "float32"), np.ones((2, 2, 4), "float32")],
                 ValueError, "broadcast")
