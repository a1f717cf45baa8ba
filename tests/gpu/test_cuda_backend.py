"""The CUDA backend on a real GPU: the simulator suite for real, CUDA-graph replay, zero-copy
cupy inputs. Skipped without a GPU (see conftest.py)."""

import numpy as np
import pytest

import verglas as vg
from tests.cuda.compare import symbolic_inputs
from tests.cuda.sim.test_elemwise import *  # noqa: F401,F403  (the same tests, on the GPU)
from tests.cuda.sim.test_ops import *  # noqa: F401,F403
from tests.cuda.sim.test_reduce import *  # noqa: F401,F403


def test_outputs_are_cupy_arrays():
    import cupy

    x, = symbolic_inputs([np.zeros((3, 4), "float32")])
    f = vg.compile([x], vg.exp(x) + 1, device="cuda")
    out = f(np.ones((3, 4), "float32"))
    assert isinstance(out, cupy.ndarray)
    np.testing.assert_allclose(vg.asnumpy(out), np.e + 1, rtol=1e-6)


def test_zero_copy_cupy_inputs_are_not_modified():
    import cupy

    a = cupy.arange(12, dtype="float64").reshape(3, 4)[:, ::-1]  # strided, negative
    before = a.copy()
    x, = symbolic_inputs([np.zeros((3, 4))])
    f = vg.compile([x], vg.tanh(x) * 2 + vg.sum(x, axis=1, keepdims=True), device="cuda")
    out = vg.asnumpy(f(a))
    ref = vg.compile([x], vg.tanh(x) * 2 + vg.sum(x, axis=1, keepdims=True), mode="reference")
    np.testing.assert_allclose(out, ref(cupy.asnumpy(a)), rtol=1e-12)
    assert bool((a == before).all())


def test_cuda_graph_replay_matches_eager():
    x, y = symbolic_inputs([np.zeros((64, 32), "float32"), np.zeros((32,), "float32")])
    outs = [vg.softmax(x * y, axis=1), vg.logsumexp(x, axis=0), vg.cumsum(x, axis=1)]
    f = vg.compile([x, y], outs, device="cuda")
    ref = vg.compile([x, y], outs, mode="reference")
    runner = f._runner
    assert runner.use_graphs
    rng = np.random.default_rng(0)
    for k in range(4):  # call 1 eager, call 2 captures and replays, later calls replay
        a = rng.standard_normal((64, 32)).astype("float32")
        b = rng.standard_normal(32).astype("float32")
        for g, e in zip(f(a, b), ref(a, b)):
            np.testing.assert_allclose(vg.asnumpy(g), e, rtol=1e-4, atol=1e-5)
    assert len(runner._graphs) == 1


def test_graph_replay_reports_index_errors():
    x, i = symbolic_inputs([np.zeros((5, 2)), np.zeros(3, "int64")])
    f = vg.compile([x, i], x[i] * 2, device="cuda")
    for _ in range(3):
        f(np.ones((5, 2)), np.array([0, 4, -5]))
    with pytest.raises(IndexError):
        f(np.ones((5, 2)), np.array([0, 5, 1]))




def test_a_first_call_with_a_cold_cache_compiles_kernels_in_a_helper(tmp_path, monkeypatch):
    """The first call starts a helper process compiling every kernel ahead (cache.Ahead; a
    CUDA context is open in this process, the helper only runs NVVM); the results are right
    and later calls, captured as a graph, load the rest."""
    from verglas import compile_helper
    from verglas.cuda_backend import cache

    if not compile_helper.available():
        pytest.skip("needs fork and two CPUs")
    made = []
    init = cache.Ahead.__init__
    monkeypatch.setattr(cache.Ahead, "__init__",
                        lambda self, specs, cc: made.append(self) or init(self, specs, cc))
    vg.config.cache_dir = tmp_path
    try:
        x, y = symbolic_inputs([np.zeros((64, 32), "float32"), np.zeros((32,), "float32")])
        outs = [vg.softmax(x * y, axis=1), vg.logsumexp(x, axis=0), vg.tanh(x) @ vg.exp(x.T)]
        f = vg.compile([x, y], outs, device="cuda")
        ref = vg.compile([x, y], outs, mode="reference")
        rng = np.random.default_rng(1)
        for _ in range(3):
            a = rng.standard_normal((64, 32)).astype("float32")
            b = rng.standard_normal(32).astype("float32")
            for g, e in zip(f(a, b), ref(a, b)):
                np.testing.assert_allclose(vg.asnumpy(g), e, rtol=1e-4, atol=1e-4)
    finally:
        del vg.config.cache_dir
    (ahead,) = made
    assert ahead.helper is not None and any(ahead.helper.reports.values())
