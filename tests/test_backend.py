"""The backend protocol: backends registered by device name, Function knowing none of them,
`mode="reference"` through the registry, and `f.source()`."""

import pickle

import numpy as np
import pytest

import verglas as vg
from verglas import backend as backends
from verglas.backend import Backend, Runner
from verglas.graph.reference import ReferenceRunner
from verglas.rewrite import get_mode


def test_three_backends_are_registered_by_name():
    assert {"cpu", "cuda", "reference"} <= set(backends.devices())
    assert backends.modes()[:3] == ("fast_run", "fast_compile", "reference")
    assert backends.select("cuda", "reference") == (backends.select("reference", "fast_run")[0],
                                                    False)
    assert backends.select("cpu", get_mode("fast_compile"))[1]
    with pytest.raises(ValueError, match="device must be one of"):
        backends.select("tpu", "fast_run")
    with pytest.raises(ValueError, match="mode must be one of"):
        backends.select("cpu", "fastest")


class _DeviceArray:
    """An array on a pretend device: Function recognizes it by `__cuda_array_interface__`."""

    def __init__(self, data):
        self.data = np.asarray(data)
        self.__cuda_array_interface__ = {"shape": self.data.shape}

    def __array__(self, dtype=None, copy=None):
        return self.data


class _ToyRunner(Runner):
    def __init__(self, program):
        self.program = program
        self.run = ReferenceRunner(program.graph)
        self.calls = 0

    def __call__(self, args):
        self.calls += 1
        return [np.array(o, copy=True) for o in self.run([np.asarray(a) for a in args])]

    def accept(self, ttype, value, label):
        return ttype.filter(value.data, label)

    def source(self):
        return "# toy\n" + str(self.program)


class _ToyBackend(Backend):
    """A backend in a few lines: runs the scheduled Program's graph with each op's perform."""

    name = "toy"

    def runner(self, code_of, key, input_types):
        return _ToyRunner(code_of())


@pytest.fixture
def toy(monkeypatch, tmp_path):
    vg.config.cache_dir = tmp_path
    monkeypatch.setitem(backends._BACKENDS, "toy", _ToyBackend())
    yield
    del vg.config.cache_dir


def test_a_new_backend_needs_only_its_registration(toy):
    x = vg.tensor("x", (None,), "float64")
    f = vg.compile([x], vg.exp(x) * 2.0 + 1.0, device="toy")
    got = f(np.arange(3.0))
    np.testing.assert_allclose(got, np.exp(np.arange(3.0)) * 2.0 + 1.0)
    assert f._runner.calls == 1 and f.program is not None
    assert f.source().startswith("# toy") and "Elemwise" in f.source()
    assert list((vg.config.cache_dir / "toy").rglob("function.pkl"))  # its own cache entries
    np.testing.assert_allclose(f(_DeviceArray([0.0, 1.0])), np.exp([0.0, 1.0]) * 2.0 + 1.0)
    again = pickle.loads(pickle.dumps(f))
    np.testing.assert_allclose(again(np.arange(3.0)), got)
    assert again._runner.calls == 1 and isinstance(again._runner, _ToyRunner)


def test_reference_mode_runs_the_reference_executor_whatever_the_device():
    x = vg.tensor("x", (None,), "float64")
    for device in ("cpu", "cuda"):  # (no GPU, no simulator needed: nothing runs on one)
        f = vg.compile([x], vg.exp(x), device=device, mode="reference")
        assert f.device == device and f.program is None
        assert "reference executor" in f.source() and "Elemwise{exp}" in f.source()
        np.testing.assert_allclose(f(_DeviceArray([0.0, 1.0])), np.exp([0.0, 1.0]))
        assert pickle.loads(pickle.dumps(f)).source() == f.source()


def test_the_reference_device_runs_the_optimized_graph():
    x = vg.tensor("x", (None,), "float64")
    out = vg.exp(x) * 2.0 + vg.exp(x)
    f = vg.compile([x], out, device="reference")
    as_written = vg.compile([x], out, mode="reference")
    assert f.program is None and "Composite" in f.source()
    assert "Composite" not in as_written.source()
    np.testing.assert_allclose(f(np.arange(3.0)), as_written(np.arange(3.0)), rtol=1e-15)


def test_cpu_source_is_the_module_that_runs_and_runs_on_its_own():
    x = vg.tensor("x", (None, 3), "float64")
    w = vg.tensor("w", (3, 3), "float64")
    c = vg.constant(np.array([1.0, 2.0, 3.0]))
    f = vg.compile([x, w], [vg.tanh(x @ w + c).sum(axis=0), vg.exp(x) * 2.0])
    src = f.source()
    assert src.startswith(f._runner.text) and "resolve_helper" in src
    namespace: dict = {}
    exec(compile(src, "<f.source()>", "exec"), namespace)
    g = np.random.default_rng(1)
    xv, wv = g.normal(size=(4, 3)), g.normal(size=(3, 3))
    args = [xv, wv] + ([np.empty(0, np.uint8)] if f._runner.workspace else [])
    args += [np.empty(0, np.uint8)] * f._runner.blocks.count  # (its outputs' blocks)
    got = namespace["program"](*args)
    for a, b in zip(got, f(xv, wv)):
        np.testing.assert_allclose(a, b, rtol=1e-14)


def test_gc_paused_restores_the_collector():
    """Compiles pause the cyclic collector and resume it after the last one, even when one
    raises; a collector the application turned off stays off."""
    import gc

    from verglas.backend import gc_paused

    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # (the outer compile is still under way)
    assert gc.isenabled()
    with pytest.raises(RuntimeError):
        with gc_paused():
            raise RuntimeError("a failed compile")
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
