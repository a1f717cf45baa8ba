"""Programs specialized for no run-time broadcasting: the usual call runs the small program,
a call that broadcasts a length-1 dim at run time (or mismatches) runs the general one."""

from __future__ import annotations


import numpy as np
import pytest

import verglas as vg
from tests.cpu_backend.utils import (calls_in_threads, compare_backend, compile_pair,
                                     expect_error, rng)


@pytest.fixture(scope="module")
def bias_grad():
    x = vg.tensor("x", shape=(None, None), dtype="float32")
    w = vg.tensor("w", shape=(None, None), dtype="float32")
    b = vg.tensor("b", shape=(None,), dtype="float32")
    h = vg.tanh(x @ w + b)
    cost = vg.sum(vg.sqr(h))
    return [x, w, b], [h, *vg.grad(cost, [x, w, b])]


def _arrays(n, k, m, bias, seed=0):
    g = rng(seed)
    return [g.normal(size=(n, k)).astype("float32"), g.normal(size=(k, m)).astype("float32"),
            g.normal(size=(bias,)).astype("float32")]


def test_specialized_source_has_no_broadcast_copies(bias_grad):
    fast, _ = compile_pair(*bias_grad)
    source = fast._runner.text
    assert "RuntimeBroadcast" in source
    assert "broadcast_into" not in source and "sum_to_shape" not in source
    assert fast._runner._general is None  # nothing general compiled for the usual calls
    compare_backend(*bias_grad, _arrays(5, 3, 4, 4))
    assert fast._runner._general is None


@pytest.mark.parametrize("n,k,m,bias", [(5, 3, 1, 4), (1, 3, 1, 6), (5, 3, 4, 1), (0, 2, 1, 3)])
def test_run_time_broadcasting_runs_the_general_program(bias_grad, n, k, m, bias):
    compare_backend(*bias_grad, _arrays(n, k, m, bias, seed=n + m))
    fast, _ = compile_pair(*bias_grad)
    if max(m, bias) > 1 and m != bias:
        assert fast._runner._general is not None


def test_incompatible_shapes_raise_numpys_error(bias_grad):
    expect_error(*bias_grad, _arrays(5, 3, 4, 3), ValueError, "cannot be broadcast")


def test_fast_and_checked_paths_both_fall_back(bias_grad):
    fast, ref = compile_pair(*bias_grad)
    arrays = _arrays(4, 2, 1, 3, seed=9)
    want = ref(*arrays)
    for got in (fast(*arrays), fast(*[np.asfortranarray(a) for a in arrays])):
        for g, e in zip(got, want):
            np.testing.assert_allclose(g, e, rtol=2e-5, atol=1e-5)


def test_threads_mixing_both_programs():
    x = vg.tensor("x", shape=(None, None), dtype="float64")
    y = vg.tensor("y", shape=(None, None), dtype="float64")
    outs = vg.grad(vg.sum(vg.exp(x * y) + x), [x, y])
    fast, ref = compile_pair([x, y], outs)
    shapes = [((3, 4), (3, 4)), ((1, 4), (3, 4)), ((3, 1), (1, 4)), ((2, 2), (2, 2))]
    data = [[rng(k).normal(size=s) for s in shapes[k % 4]] for k in range(8)]
    expected = [ref(*d) for d in data]
    calls_in_threads(fast, data, expected, 100, rtol=1e-12)


def test_ops_used_twice_share_one_checked_kernel():
    """Two layers' tanh(x @ w + b) and two column sums: one kernel function each, called after
    each step's own broadcast check (the general program takes a broadcasting call)."""
    x = vg.tensor("x", shape=(None, None), dtype="float32")
    w1, w2 = (vg.tensor(n, shape=(None, None), dtype="float32") for n in ("w1", "w2"))
    b1, b2 = (vg.tensor(n, shape=(None,), dtype="float32") for n in ("b1", "b2"))
    h1 = vg.tanh(x @ w1 + b1)
    h2 = vg.tanh(h1 @ w2 + b2)
    outs = [h2, vg.sum(h1, axis=0, keepdims=True), vg.sum(h2, axis=0, keepdims=True)]
    inputs = [x, w1, b1, w2, b2]
    fast, _ = compile_pair(inputs, outs)
    source = fast._runner.text
    assert source.count("def kern") == 1 and source.count("def kred") == 1
    assert source.count("kern0, (") == 2 and source.count("kred0, (") == 2  # (called twice)
    g = rng(4)
    arrays = [g.normal(size=s).astype("float32") for s in ((5, 3), (3, 4), (4,), (4, 2), (2,))]
    compare_backend(inputs, outs, arrays)
    arrays[2] = arrays[2][:1]  # b1 broadcasts at run time: the general program
    compare_backend(inputs, outs, arrays)


def test_storage_shared_on_the_specialized_assumption():
    """The specialized plan lets x @ w (x0, n) take the storage of y @ w (y0, n), whose sizes
    only the check of `(x @ w) * s` (s of y0 rows) makes equal; a call where x0 != y0 (one
    of them 1) finds another size where the storage is reused and runs the general program:
    right results, and the general plan keeps the two apart."""
    x = vg.tensor("x", shape=(None, None), dtype="float64")
    y = vg.tensor("y", shape=(None, None), dtype="float64")
    w = vg.tensor("w", shape=(None, None), dtype="float64")
    s = vg.sum(vg.exp(y @ w), axis=1, keepdims=True)
    out = ((x * vg.sum(s)) @ w) * s  # (x's product after y's: the order the plan needs)
    fast, _ = compile_pair([x, y, w], [out])
    program = fast.program
    products = [s.outputs[0] for s in program.steps if type(s.node.op).__name__ == "MatMul"]
    assert len(products) == 2
    assert program.slots[products[0]] == program.slots[products[1]], program
    general = program.general()
    assert general.slots[products[0]] != general.slots[products[1]]
    g = rng(4)
    for x0, y0 in ((3, 3), (1, 3), (3, 1)):
        compare_backend([x, y, w], [out], [g.normal(size=(x0, 4)), g.normal(size=(y0, 4)),
                                           g.normal(size=(4, 5))])
