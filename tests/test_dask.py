"""verglas on dask: Functions submitted to, and mapped over dask arrays on, worker processes."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest

import verglas as vg
from verglas import demo
from verglas import function as vg_function

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")
vd = pytest.importorskip("verglas.dask")

ROWS, CHUNK = 200_000, 25_000  # eight blocks for two workers


def mlp(x, params):
    """The demo MLP's forward pass: tanh hidden layers, a linear last layer."""
    h = x
    for k in range(0, len(params) - 2, 2):
        h = vg.tanh(h @ params[k] + params[k + 1])
    return h @ params[-2] + params[-1]


def numpy_mlp(x, params):
    h = x
    for k in range(0, len(params) - 2, 2):
        h = np.tanh(h @ params[k] + params[k + 1])
    return h @ params[-2] + params[-1]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """A cache directory of its own and row loops off, here and in the workers (which inherit
    the environment): the workers load what this process compiled."""
    saved = {k: os.environ.get(k) for k in ("VERGLAS_CACHE_DIR", "VERGLAS_THREADS")}
    os.environ["VERGLAS_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    os.environ["VERGLAS_THREADS"] = "0"
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="module")
def model(env):
    x, _, params = demo.symbolic_inputs()
    y = mlp(x, params)
    forward = vg.compile([x, *params], y)
    # two outputs: the scores and each row's best class
    both = vg.compile([x, *params], [y, vg.argmax(y, axis=1)])
    _, _, weights = demo.data(np.random.default_rng(0))
    return forward, both, weights


@pytest.fixture(scope="module")
def client(env):
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        with distributed.Client(cluster) as c:
            yield c


@pytest.fixture(scope="module")
def rows(client):
    """Rows made on the workers (kept there), and a copy here for numpy."""
    x = da.random.default_rng(1).standard_normal((ROWS, demo.WIDTHS[0]),
                                                 chunks=(CHUNK, demo.WIDTHS[0]), dtype=np.float32)
    x = x.persist()
    return x.compute(), x


def test_map_blocks_matches_numpy_and_each_worker_builds_once(client, model, rows):
    forward, _, weights = model
    xv, x = rows
    y = vd.map_blocks(forward, x, *weights)
    assert y.dtype == np.float32 and y.shape == (ROWS, demo.WIDTHS[-1])
    assert y.chunks == ((CHUNK,) * (ROWS // CHUNK), (demo.WIDTHS[-1],))
    np.testing.assert_allclose(y.compute(), numpy_mlp(xv, weights), rtol=1e-4, atol=1e-5)
    # eight tasks, each carrying the pickled Function, on two workers
    builds = client.run(vd.runner_builds)
    assert len(builds) == 2
    assert all(b.get(forward.cache_key, 0) <= 1 for b in builds.values()), builds
    assert sum(b.get(forward.cache_key, 0) for b in builds.values()) >= 1, builds


def test_map_blocks_with_two_outputs(client, model, rows):
    _, both, weights = model
    xv, x = rows
    scores, best = vd.map_blocks(both, x[: ROWS // 2], *weights)
    assert (scores.dtype, best.dtype) == (np.float32, np.int64)
    assert best.chunks == ((CHUNK,) * (ROWS // 2 // CHUNK),)
    got_scores, got_best = da.compute(scores, best)
    want = numpy_mlp(xv[: ROWS // 2], weights)
    np.testing.assert_allclose(got_scores, want, rtol=1e-4, atol=1e-5)
    assert np.mean(got_best == want.argmax(axis=1)) > 0.999  # (ties within float32 rounding)
    builds = client.run(vd.runner_builds)
    assert all(b.get(both.cache_key, 0) <= 1 for b in builds.values()), builds


def test_submit(client, model, rows):
    forward, _, weights = model
    xv, _ = rows
    futures = [client.submit(forward, xv[k * 1000:(k + 1) * 1000], *weights, pure=False)
               for k in range(6)]
    for k, future in enumerate(futures):
        np.testing.assert_allclose(future.result(), numpy_mlp(xv[k * 1000:(k + 1) * 1000],
                                                               weights), rtol=1e-4, atol=1e-5)
    builds = client.run(vd.runner_builds)
    assert all(b.get(forward.cache_key, 0) <= 1 for b in builds.values()), builds


def test_a_process_builds_a_runner_once_however_often_it_unpickles(model):
    forward, _, weights = model
    blob = pickle.dumps(forward)
    before = vg_function.RUNNER_BUILDS[forward.cache_key]
    copies = [pickle.loads(blob) for _ in range(5)]
    assert vg_function.RUNNER_BUILDS[forward.cache_key] - before <= 1
    assert all(c._runner is copies[0]._runner for c in copies)
    xv = np.ones((3, demo.WIDTHS[0]), "float32")
    np.testing.assert_array_equal(copies[-1](xv, *weights), forward(xv, *weights))


def test_map_blocks_layouts_and_errors(env):
    a = vg.tensor("a", shape=(None, None), dtype="float64")
    b = vg.tensor("b", shape=(None,), dtype="float64")
    av, bv = np.arange(54.0).reshape(6, 9), np.linspace(0, 1, 9)
    f = vg.compile([a, b], [a * b, vg.sum(a, axis=1)])
    # the vector's blocks align with the matrix's trailing axis; a row sum follows the rows
    prod, rowsum = vd.map_blocks(f, da.from_array(av, chunks=(4, 9)), da.from_array(bv))
    assert prod.chunks == ((4, 2), (9,)) and rowsum.chunks == ((4, 2),)
    got = da.compute(prod, rowsum, scheduler="sync")
    np.testing.assert_allclose(got[0], av * bv)
    np.testing.assert_allclose(got[1], av.sum(axis=1))
    # a row sum over column blocks would be a sum per block: refused
    with pytest.raises(ValueError, match="output 1 does not follow the blocks along axis 1"):
        vd.map_blocks(f, da.from_array(av, chunks=(3, 5)), da.from_array(bv, chunks=5))
    x = vg.tensor("x", shape=(None, 4), dtype="float32")
    g = vg.compile([x], x * 2)
    with pytest.raises(ValueError, match="blocks of length \\[2\\] along axis 1"):
        vd.map_blocks(g, da.ones((8, 4), chunks=(4, 2), dtype="float32"))
    with pytest.raises(TypeError, match="no dask array"):
        vd.map_blocks(g, np.ones((8, 4), "float32"))
    with pytest.raises(TypeError, match="takes 1 input "):
        vd.map_blocks(g)
