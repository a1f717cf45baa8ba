"""A compiled CPU Function as users hold it: thread safety, pickling without re-running the
rewrites, run-time errors as Python exceptions."""

import os
import pickle
import subprocess
import sys

import cloudpickle
import numpy as np
import pytest

import verglas as vg
from tests.cpu_backend.test_array_kernels import matmul_program
from tests.cpu_backend.test_reduce_kernels import reductions
from tests.cpu_backend.utils import calls_in_threads, compile_pair, expect_error, rng


def test_threads_share_one_function():
    inputs, outs = reductions("float64")
    fast, ref = compile_pair(inputs, outs)
    data = [rng(k).normal(size=(3, 4, 5)) for k in range(8)]
    expected = [ref(d) for d in data]
    calls_in_threads(fast, [[d] for d in data], expected, 200, rtol=1e-12, atol=1e-12)


def _workspace_program():
    """A program with temporaries of several sizes, returned as views and inplace results."""
    x = vg.tensor("x", (None, 4), "float64")
    w = vg.tensor("w", (4, 4), "float64")
    h = vg.tanh(x @ w)
    z = vg.exp(h @ w.T) + h
    return [x, w], [z, h.T, (z * h).sum(axis=0), (h @ w).sum()]


def test_temporaries_live_in_a_workspace_kept_across_calls():
    inputs, outs = _workspace_program()
    fast, ref = compile_pair(inputs, outs)
    runner = fast._runner
    assert runner.workspace and "ws_carve" in runner.text
    w = rng(1).normal(size=(4, 4))
    results = []
    for n in (5, 300, 2, 0, 300, 1):  # the workspace grows, then serves smaller calls
        x = rng(n).normal(size=(n, 4))
        got = fast(x, w)
        for g, e in zip(got, ref(x, w)):
            np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12)
        results.append(([g.copy() for g in got], got))
    for saved, got in results:  # later calls overwrote none of an earlier call's results
        for s, g in zip(saved, got):
            np.testing.assert_array_equal(s, g)
    assert len(runner.pool) == 1  # one thread: one workspace, as big as the largest call
    ws = runner.pool[0]
    assert ws.nbytes >= 2 * 300 * 4 * 8
    assert not any(np.shares_memory(g, ws) for _, got in results for g in got)
    # calling the runner directly (the checked path) shares the same pool
    x = rng(9).normal(size=(7, 4))
    for g, e in zip(fast._call_checked(x[::1], w), ref(x, w)):
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12)
    assert runner.pool == [ws]


def test_temporaries_sized_by_values_are_taken_as_they_come():
    # arange(n)'s length is a value: its temporaries are taken from the workspace where it has
    # room, else allocated, and the next call gets a workspace that holds them
    n = vg.scalar("n", "int64")
    x = vg.tensor("x", (None,), "float64")
    r = vg.arange(n) * 1.5
    y = vg.exp(vg.sin(r) + x.sum())
    fast, ref = compile_pair([n, x], [y * 2.0, vg.cos(y).sum()])
    assert "ws_take" in fast._runner.text and "ws_carve" in fast._runner.text
    xv = rng(3).normal(size=4)
    sizes = []
    for count in (3, 5000, 7, 0, 5000, 20000):
        for g, e in zip(fast(np.int64(count), xv), ref(np.int64(count), xv)):
            np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12)
        sizes.append(fast._runner.pool[0].nbytes)
    assert sizes[1] >= 5000 * 8 and sizes[2] == sizes[4] == sizes[1] and sizes[5] >= 20000 * 8
    assert fast._runner.pool[0].ctypes.data % 64 == 0  # (a grown one too: runtime.aligned_bytes)


def test_threads_calling_at_once_each_get_a_workspace():
    inputs, outs = _workspace_program()
    fast, ref = compile_pair(inputs, outs)
    w = rng(2).normal(size=(4, 4))
    data = [[rng(k).normal(size=(1 + 37 * k, 4)), w] for k in range(8)]
    expected = [ref(*d) for d in data]
    calls_in_threads(fast, data, expected, 200, rtol=1e-12, atol=1e-12)
    assert 1 <= len(fast._runner.pool) <= 8


def _large_outputs():
    """A program whose first output (rows x 64 float64) is large enough for a block."""
    x = vg.tensor("x", (None, 64), "float64")
    w = vg.tensor("w", (64, 64), "float64")
    return [x, w], [vg.tanh(x @ w), (x * 2.0).sum()]


def test_outputs_are_carved_from_blocks_recycled_once_nothing_holds_them():
    # a freed output's pages go back to the system and fault in again at the next call (rnn_grad
    # float64: 96 page faults a call, 1.39 ms; recycled, 1.04 ms)
    inputs, outs = _large_outputs()
    fast, ref = compile_pair(inputs, outs)
    blocks = fast._runner.blocks
    assert blocks.count == 1  # (the 0-d sum is too small for one: never given one)
    g = rng(4)
    w = g.normal(size=(64, 64)) / 8
    x = g.normal(size=(2000, 64))
    for _ in range(3):  # results dropped at once: two sets of blocks, used in turn
        fast(x, w)
    # (addresses: a reference the test kept would count as a caller's)
    held = {b.ctypes.data for taken in blocks.sets for b in taken if b.nbytes}
    assert len(blocks.sets) == 2 and len(held) == 2
    got = fast(x, w)
    assert got[0].ctypes.data in held and got[0].ctypes.data % 64 == 0  # (on a cache line)
    np.testing.assert_allclose(got[0], np.tanh(x @ w), rtol=1e-12, atol=1e-12)
    # outputs a caller holds are never written again, whichever way it holds them
    xs = [g.normal(size=(2000, 64)) for _ in range(5)]
    kept = [fast(xk, w) for xk in xs]
    views = [fast(xk, w)[0][::2] for xk in xs]
    again = fast(kept[0][0], w)[0]  # (an output as an input: read, not overwritten)
    for xk, result, view in zip(xs, kept, views):
        for got, expected in zip(result, ref(xk, w)):
            np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(view, np.tanh(xk @ w)[::2], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(again, np.tanh(kept[0][0] @ w), rtol=1e-12, atol=1e-12)


def test_threads_calling_at_once_never_share_an_output_block():
    inputs, outs = _large_outputs()
    fast, ref = compile_pair(inputs, outs)
    w = rng(5).normal(size=(64, 64)) / 8
    data = [[rng(k).normal(size=(1500 + 100 * k, 64)), w] for k in range(8)]
    expected = [ref(*d) for d in data]
    calls_in_threads(fast, data, expected, 50, rtol=1e-12, atol=1e-12)


def test_the_workspace_can_be_switched_off(monkeypatch):
    monkeypatch.setenv("VERGLAS_WORKSPACE", "0")  # (setattr would leave an override behind)
    x = vg.tensor("x", (None, 3), "float64")
    w = vg.tensor("w", (3, 3), "float64")
    f = vg.compile([x, w], vg.exp(vg.tanh(x @ w) @ w).sum(axis=1))  # (a graph of its own)
    assert not f._runner.workspace and "ws_take" not in f._runner.text
    g = rng(7)
    xv, wv = g.normal(size=(5, 3)), g.normal(size=(3, 3))
    np.testing.assert_allclose(f(xv, wv), np.exp(np.tanh(xv @ wv) @ wv).sum(axis=1),
                               rtol=1e-13)


def test_one_signature_serves_every_call():
    # read-only, strided, negative-stride, other-dtype and list inputs are converted before
    # the call: the program is never compiled again for another argument type
    x = vg.tensor("x", (None,), "float64")
    f = vg.compile([x], vg.exp(x) * 2.0)
    as_list = vg.compile([x], [vg.exp(x) * 2.0])  # the same graph: one cache entry
    base = rng(6).normal(size=12)
    read_only = base.copy()
    read_only.setflags(write=False)
    for arg in (base, read_only, base[::2], base[::-1], base.astype("float32"),
                base.tolist()):
        expected = np.exp(np.asarray(arg, dtype="float64")) * 2.0
        np.testing.assert_allclose(f(arg), expected, rtol=1e-15)
        np.testing.assert_allclose(as_list(arg)[0], expected, rtol=1e-15)
    assert len(f._runner.jitted.overloads) == 1
    assert not read_only.flags.writeable


def test_pickle_round_trip_skips_rewrites(monkeypatch):
    inputs, outs = matmul_program()
    fast, _ = compile_pair(inputs, outs)
    g = rng(3)
    arrays = [g.normal(size=(3, 4)), g.normal(size=(5, 2)).astype("float32"), g.normal(size=6),
              g.normal(size=(2, 3, 4)), g.normal(size=(2, 1, 5, 4)).astype("float32")]
    expected = fast(*arrays)
    import verglas.function
    import verglas.rewrite

    real = verglas.rewrite.rewrite_graph
    callers = []

    def record(*args, **kwargs):
        callers.append(sys._getframe(1).f_globals["__name__"])
        return real(*args, **kwargs)

    def fail(*args, **kwargs):
        raise AssertionError("the program's graph was rewritten again on unpickling")

    import verglas.schedule

    monkeypatch.setattr(verglas.rewrite, "rewrite_graph", record)
    monkeypatch.setattr(verglas.function, "_optimize", fail)
    monkeypatch.setattr(verglas.schedule, "lower", fail)  # the Program travels with the Function
    for dumps, loads in ((pickle.dumps, pickle.loads), (cloudpickle.dumps, pickle.loads)):
        again = loads(dumps(fast))
        for a, b in zip(again(*arrays), expected):
            np.testing.assert_array_equal(a, b)
        assert again.program.peak_bytes([a.shape for a in arrays]) > 0
    assert callers == [], callers  # no rewrite at all, not even of the shape graph


def test_broadcast_error_names_op():
    x = vg.tensor("x", shape=(None,), dtype="float64")
    y = vg.tensor("y", shape=(None,), dtype="float64")
    expect_error([x, y], vg.sum(x + y), [np.ones(3), np.ones(2)], ValueError, "Elemwise")


def test_inputs_never_modified_by_inplace_program():
    x = vg.tensor("x", shape=(None,), dtype="float64")
    out = vg.set_subtensor(x[1:], vg.exp(x[:-1]) * 2.0) + 1.0
    fast, ref = compile_pair([x], out)
    a = np.arange(5.0)
    np.testing.assert_allclose(fast(a), ref(a))
    np.testing.assert_array_equal(a, np.arange(5.0))


_WARM_SCRIPT = """
import numpy as np, verglas as vg
x = vg.tensor("x", shape=(None, None), dtype="float32")
f = vg.compile([x], [vg.softmax(x), vg.max(x, axis=0), vg.sum(x * 2.0, axis=1)])
xv = np.random.default_rng(0).standard_normal((6, 5)).astype("float32")
ref = vg.compile([x], [vg.softmax(x), vg.max(x, axis=0), vg.sum(x * 2.0, axis=1)],
                 mode="reference")
assert all(np.allclose(a, b, rtol=1e-5) for a, b in zip(f(xv), ref(xv)))
print("ok")
"""


def test_a_second_process_loads_the_cached_program(tmp_path):
    # every jitted helper a generated program refers to must be found again by name
    env = dict(os.environ, VERGLAS_CACHE_DIR=str(tmp_path))
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", _WARM_SCRIPT], env=env, text=True,
                             capture_output=True, timeout=300)
        assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
    assert list(tmp_path.rglob("runner.pkl"))  # the second run came from the cache


def _broadcasting_program():
    x = vg.tensor("x", shape=(None, None), dtype="float64")
    b = vg.tensor("b", shape=(None,), dtype="float64")
    return [x, b], [vg.tanh(x + b), vg.sum(x * b, axis=0)]


def test_a_warm_start_loads_the_graph_only_when_asked(tmp_path, monkeypatch):
    """A cached entry is called with the stored code alone; the optimized graph and Program
    load on first need (the general program of a call broadcasting at run time, `graph`,
    pickling), or are rebuilt when their file is gone."""
    from verglas import cache

    monkeypatch.setenv("VERGLAS_CACHE_DIR", str(tmp_path))
    cold = vg.compile(*_broadcasting_program())
    ref = vg.compile(*_broadcasting_program(), mode="reference")
    g = rng(5)
    x, b = g.normal(size=(4, 3)), g.normal(size=3)
    warm = vg.compile(*_broadcasting_program())
    assert warm._graph is None
    for got, want in zip(warm(x, b), ref(x, b)):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    assert warm._graph is None  # the specialized program needed no graph
    for got, want in zip(warm(x, b[:1]), ref(x, b[:1])):  # broadcasting: the general program
        np.testing.assert_allclose(got, want, rtol=1e-12)
    assert warm.graph is cold.graph and warm.program.peak_bytes([(4, 3), (3,)]) > 0
    for got, want in zip(pickle.loads(pickle.dumps(warm))(x, b), ref(x, b)):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    lost = vg.compile(*_broadcasting_program())
    for path in tmp_path.rglob("function.pkl"):
        path.unlink()
    assert lost.program.graph is lost.graph and "Elemwise" in str(lost.program)
    assert list(tmp_path.rglob("function.pkl"))  # stored again
    assert cache.load_pickle(next(tmp_path.rglob("inputs.pkl"))) == [
        ("float64", (None, None)), ("float64", (None,))]


def test_stored_bytecode_is_checked_against_its_source(tmp_path):
    from verglas import cache

    path = tmp_path / "m.py"
    path.write_text("VALUE = 1\n")
    namespace: dict = {}
    exec(cache.code_of(path), namespace)
    assert namespace["VALUE"] == 1 and (tmp_path / "m.code").exists()
    path.write_text("VALUE = 2\n")  # a changed source is compiled again
    exec(cache.code_of(path), namespace)
    assert namespace["VALUE"] == 2
    (tmp_path / "m.code").write_bytes(b"garbage")  # so is one whose bytecode is unreadable
    exec(cache.code_of(path), namespace)
    assert namespace["VALUE"] == 2


@pytest.mark.parametrize("width", [512, None])
def test_generated_functions_ask_for_wide_vectors(monkeypatch, width):
    import numba

    from verglas.cpu_backend import intrinsics

    monkeypatch.setenv("VERGLAS_VECTOR_WIDTH", str(width or 0))  # (0: LLVM's own choice)

    def body(x):
        intrinsics.prefer_wide_vectors()
        return x * 2.0

    fn = numba.njit(body)  # a new function: the monkeypatched width is read when it lowers
    assert fn(np.float64(1.5)) == 3.0
    llvm = fn.inspect_llvm(fn.signatures[0])
    assert ('"prefer-vector-width"="512"' in llvm) == (width == 512)
    inputs, outs = _workspace_program()
    source = compile_pair(inputs, outs)[0]._runner.text
    assert source.count("wide0()") == source.count("\ndef ")
