"""Elementwise loops on the thread pool (schedule/pools.py decides, cpu_backend/kernels.py
emits): a large loop runs in chunks, each over views of its rows, and gives numpy's answer; a
small one and a loop body's stay on the calling thread.

One program serves every case here, so numba compiles it once.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import verglas as vg
from tests.cpu_backend.utils import calls_in_threads, compare_backend, compile_pair, rng
from verglas.cpu_backend.threads import parallel_rows

F32 = np.float32


def _outputs(x, b, y):
    return [
        vg.tanh(x),                       # flat, a vector math call per element
        x * F32(3) + y,                   # flat, cheap
        vg.tanh(x + b),                   # rows of x with a broadcast row b
        x + x[::-1, ::-1],                # a negative-stride view: loops over both axes
        vg.exp(x.T) * 2,                  # a transposed view
        vg.tanh(x * b) * (1 - vg.exp(-x)),  # an intermediate overwritten inplace
    ]


@pytest.fixture(scope="module")
def program():
    x = vg.tensor("x", shape=(None, None), dtype="float32")
    b = vg.tensor("b", shape=(None,), dtype="float32")
    y = vg.tensor("y", shape=(None, None), dtype="float32")
    inputs, outs = [x, b, y], _outputs(x, b, y)
    return inputs, outs, compile_pair(inputs, outs)


def _data(rows, cols, seed):
    g = rng(seed)
    x = g.normal(size=(rows, cols)).astype("float32")
    if x.size >= 4:
        x.flat[:4] = [np.nan, np.inf, -np.inf, -0.0]
    return [x, g.normal(size=cols).astype("float32"),
            g.normal(size=(rows, cols)).astype("float32")]


def test_the_loops_the_schedule_pools_are_handed_to_the_pool(program):
    """One pool call per loop the Program lists (schedule/pools.py), no other."""
    _, _, (fast, _) = program
    calls = re.findall(r"parallel_range\d*\(", fast._runner.text)
    assert len(calls) == (len(fast.program.pooled) if parallel_rows() else 0)
    assert len(fast.program.pooled) == 6


@pytest.mark.parametrize("rows,cols", [(700, 400), (3, 100_000), (1, 300_000), (0, 5),
                                       (2, 1), (40, 40)])
def test_pooled_loops_match_numpy(program, rows, cols):
    """Large enough for the pool (700 x 400: even the cheap loops), split unevenly (3 rows),
    one row (nothing to share), empty and small (on the calling thread)."""
    inputs, outs, _ = program
    compare_backend(inputs, outs, _data(rows, cols, rows + cols))


def test_inputs_are_left_alone(program):
    _, _, (fast, _) = program
    data = _data(300, 300, 1)
    kept = [d.copy() for d in data]
    fast(*data)
    for d, k in zip(data, kept):
        np.testing.assert_array_equal(d, k)


def test_pooled_loops_under_concurrent_calls(program):
    """Eight Python threads calling at once, with large and small inputs."""
    _, _, (fast, ref) = program
    data = [_data(600 + k, 500, k) if k % 2 else _data(20 + k, 30, k) for k in range(8)]
    expected = [ref(*d) for d in data]
    calls_in_threads(fast, data, expected, 40, rtol=2e-5, atol=1e-6)


def test_a_loop_body_stays_on_the_calling_thread():
    """A scan's step is small and runs many times: its elementwise loops stay inline."""
    x = vg.tensor("x", shape=(None,), dtype="float32")
    ys = vg.scan(lambda h: vg.tanh(h) * F32(0.5), outputs_info=[x], n_steps=3)
    fast, ref = compile_pair([x], [ys[-1]])
    assert "parallel_range" not in fast._runner.text
    data = rng(2).normal(size=50_000).astype("float32")
    np.testing.assert_allclose(fast(data), ref(data), rtol=2e-6)


def test_an_error_in_a_pooled_loop_is_raised_as_it_is():
    """A chunk's error stays on its pool thread: the loop runs again on the calling thread and
    raises numpy's error, not a MemoryError."""
    x = vg.tensor("x", shape=(None,), dtype="int64")
    y = vg.tensor("y", shape=(None,), dtype="int64")
    fast, _ = compile_pair([x, y], [vg.exp(x * F32(1)) + x ** y])
    n = 200_000
    ones, exps = np.ones(n, np.int64), np.full(n, 2, np.int64)
    np.testing.assert_allclose(fast(ones, exps)[0], np.exp(ones) + 1, rtol=1e-6)
    exps[n - 7] = -1
    with pytest.raises(ValueError, match="negative integer powers"):
        fast(ones, exps)


def test_a_shared_kernel_takes_its_rows_from_the_pool():
    """In a large program the loops are shared kernels: a kernel takes a chunk's rows, and
    its call sites hand it to the pool."""
    x = vg.tensor("x", shape=(None, None), dtype="float32")
    b = vg.tensor("b", shape=(None,), dtype="float32")
    acc = x
    for k in range(15):  # (LARGE_FUNCTION_STEPS: 24 steps over arrays)
        acc = vg.tanh(acc * F32(0.5 + k / 30) + b)
        acc = acc - vg.mean(acc, axis=0)  # (a column sum: the loops stay apart)
    fast, ref = compile_pair([x, b], [acc])
    src = fast._runner.text
    if parallel_rows():
        assert re.search(r"\ndef kern\d+\(lo, hi, ", src)
        assert re.search(r"parallel_range\d*\(kern\d+, ", src)
    for rows, cols in [(600, 300), (3, 20_000), (1, 9), (0, 4)]:
        data = [rng(1).normal(size=(rows, cols)).astype("float32"),
                rng(3).normal(size=cols).astype("float32")]
        np.testing.assert_allclose(fast(*data)[0], ref(*data)[0], rtol=2e-4, atol=2e-5)


def test_a_program_with_a_matrix_product_keeps_its_loops_on_one_thread():
    """OpenBLAS's threads spin after each product and hold the other core: a pooled loop
    gains nothing there (the scheduler's decision, schedule/pools.py)."""
    x = vg.tensor("x", shape=(None, None), dtype="float32")
    fast, ref = compile_pair([x], [vg.tanh(x @ x)])
    assert "parallel_range" not in fast._runner.text
    data = rng(4).normal(size=(300, 300)).astype("float32") / 10
    np.testing.assert_allclose(fast(data)[0], ref(data)[0], rtol=2e-5, atol=1e-6)


def test_a_loop_of_term_runs_is_pooled_in_blocks_per_chunk():
    """A sum of like terms a[i] * sin(x + i) loops over its terms in blocks of elements
    (scalar_code.ElementBlock); pooled, each chunk allocates its own blocks' scratch."""
    x = vg.tensor("x", shape=(None,), dtype="float64")
    a = vg.tensor("a", shape=(None,), dtype="float64")
    acc = a[0] * vg.sin(x)
    for i in range(1, 12):
        acc = acc + a[i] * vg.sin(x + i) * vg.cos(x * i)
    fast, ref = compile_pair([x, a], [acc])
    assert len(fast.program.pooled) == 1
    src = fast._runner.text
    if parallel_rows():
        (rows_fn,) = re.findall(r"\ndef (rows\d*)\(lo, hi, ", src)
        assert re.search(rf"parallel_range\d*\({rows_fn}, ", src)
    for n in (50_000, 1001, 0):
        data = [np.linspace(-3, 3, n), np.arange(12.0) / 7]
        np.testing.assert_allclose(fast(*data)[0], ref(*data)[0], rtol=1e-12, atol=1e-12)


@pytest.fixture(scope="module")
def whole_reductions():
    x = vg.tensor("x", shape=(None, None), dtype="float32")
    v = vg.tensor("v", shape=(None,), dtype="float64")
    n = vg.tensor("n", shape=(None,), dtype="int16")
    outs = [x.sum(), x.max(), vg.min(x), (x * x).sum(), v.sum(), vg.prod(v), v.max(),
            n.sum(), n.max(), vg.any(n), vg.all(n)]
    return [x, v, n], outs, compile_pair([x, v, n], outs)


@pytest.mark.parametrize("rows,cols,length", [(1000, 300, 400_000), (3, 200_000, 17),
                                              (0, 5, 0), (1, 1, 1)])
def test_whole_array_reductions_in_parts_match_numpy(whole_reductions, rows, cols, length):
    """A reduction over all axes splits into parts along the first axis (schedule/pools.py):
    many parts (1000 rows), as many as rows (3), one (a single element), none to take (empty:
    the identities; max of nothing raises, so max and min run on non-empty arrays only)."""
    inputs, outs, (fast, _) = whole_reductions
    assert {k for k, _ in fast.program.pooled} == {
        s.index for s in fast.program.steps if s.node.op in {o.owner.op for o in outs}}
    g = rng(5)
    x = g.normal(size=(rows, cols)).astype("float32")
    v = np.exp(g.normal(size=length) / length ** 0.5) if length else np.zeros(0)
    n = g.integers(-300, 300, size=length).astype("int16")
    if x.size > 10:
        x.flat[[7, x.size - 3]] = [50.0, -60.0]
    if rows == 0:
        with pytest.raises(ValueError):
            fast(x, v, n)
        return
    got = fast(x, v, n)
    want = [x.sum(dtype="float64"), x.max(), x.min(), (x.astype("float64") ** 2).sum(),
            v.sum(), v.prod(), v.max() if length else None, n.sum(),
            n.max() if length else None, n.any(), n.all()]
    for k, (g_, w) in enumerate(zip(got, want)):
        if w is None:
            continue
        np.testing.assert_allclose(np.float64(g_), np.float64(w), rtol=1e-5 if k < 4 else 1e-12)
    x[rows // 2, 0] = np.nan
    got = fast(x, v, n)
    assert np.isnan(got[0]) and np.isnan(got[1]) and np.isnan(got[2])
    src = fast._runner.text
    assert ("parallel_range" in src) == parallel_rows()


def test_argmax_rows_on_the_pool_match_numpy():
    """The rows of an argmax/argmin along one axis, shared out (schedule/pools.py): large
    enough for the pool, NaN rows and ties, float and integer, and a compare-loop dtype."""
    x = vg.tensor("x", shape=(None, None), dtype="float32")
    n = vg.tensor("n", shape=(None, None), dtype="uint8")
    h = vg.tensor("h", shape=(None, None), dtype="float16")
    fast, _ = compile_pair([x, n, h], [x.argmax(axis=1), vg.argmin(x, axis=0),
                                       n.argmax(axis=1), h.argmax(axis=1)])
    g = rng(11)
    xv = g.normal(size=(700, 600)).astype("float32")
    xv[3, [10, 500]] = np.nan
    xv[5, :] = 1.0
    nv = g.integers(0, 256, size=(700, 600)).astype("uint8")
    hv = g.normal(size=(700, 600)).astype("float16")
    got = fast(xv, nv, hv)
    for k, want in enumerate([xv.argmax(axis=1), xv.argmin(axis=0), nv.argmax(axis=1),
                              hv.argmax(axis=1)]):
        np.testing.assert_array_equal(got[k], want)
    assert len(fast.program.pooled) == 4
    if parallel_rows():
        assert len(re.findall(r"parallel_range\d*\(", fast._runner.text)) == 4


def test_reductions_over_last_axes_on_the_pool_match_numpy():
    """Rows of the first axis shared out (schedule/pools.py): pairwise distances through
    broadcast views (x[:, None] of a C array is a C view), a 3-d sum over its last two axes,
    a float max with NaN rows, an int sum kept as dims."""
    a = vg.tensor("a", shape=(None, None), dtype="float32")
    b = vg.tensor("b", shape=(None, None), dtype="float32")
    c = vg.tensor("c", shape=(None, None, None), dtype="float64")
    n = vg.tensor("n", shape=(None, None), dtype="int16")
    outs = [((a[:, None, :] - b[None, :, :]) ** 2).sum(-1), c.sum(axis=(1, 2)),
            vg.max(a * 2, axis=1), n.sum(axis=1, keepdims=True)]
    fast, _ = compile_pair([a, b, c, n], outs)
    assert len(fast.program.pooled) == 4
    g = rng(13)
    av = g.normal(size=(300, 64)).astype("float32")
    av[7, 5] = np.nan
    bv = g.normal(size=(500, 64)).astype("float32")
    cv = g.normal(size=(50, 30, 40))
    nv = g.integers(-3000, 3000, size=(400, 300)).astype("int16")
    want = [((av[:, None, :] - bv[None, :, :]) ** 2).sum(-1), cv.sum(axis=(1, 2)),
            (av * 2).max(axis=1), nv.sum(axis=1, keepdims=True)]
    got = fast(av, bv, cv, nv)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    assert np.isnan(got[0][7]).all() and np.isnan(got[2][7])
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12)
    np.testing.assert_array_equal(got[2], want[2])
    np.testing.assert_array_equal(got[3], want[3])
    if parallel_rows():
        assert len(re.findall(r"parallel_range\d*\(", fast._runner.text)) == 4
