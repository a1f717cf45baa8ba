"""A stored program's row functions and kernels compile in a forked process while the program
compiles (cpu_backend/aside.py); what the helper does not do is done here, with the same
results."""

import os

import numpy as np
import pytest

import verglas as vg
from tests.cpu_backend.test_callees import _program
from tests.cpu_backend.utils import rng
from verglas import compile_helper
from verglas.compile_helper import CompileHelper

pytestmark = pytest.mark.skipif(not compile_helper.available(),
                                reason="needs fork and two CPUs")


def _compiled(tmp_path, scale: float):
    """The test program (another for each `scale`: a module of its own) compiled as a stored
    program, checked against the reference."""
    inputs, outputs = _program()
    outputs = [o * scale for o in outputs]
    vg.config.cache_dir = tmp_path
    try:
        f = vg.compile(inputs, outputs)
    finally:
        del vg.config.cache_dir
    xv, yv = rng(2).standard_normal((5, 5)), rng(3).standard_normal((5, 5))
    ref = vg.compile(inputs, outputs, mode="reference")
    for got, want in zip(f(xv, yv), ref(xv, yv)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    return f


def _leaves(f) -> dict:
    """f's row functions and kernels (the leaves), by name."""
    namespace = f._runner.jitted.py_func.__globals__
    return {name: value for name, value in namespace.items()
            if name.startswith(("rows", "kern")) and hasattr(value, "overloads")}


def _sent(monkeypatch) -> list:
    """The names of the functions sent to the helper, as they are sent."""
    sent, send = [], CompileHelper.send

    def recording(self, k, payload):
        ok = send(self, k, payload)
        if ok:
            sent.append(payload[0])
        return ok
    monkeypatch.setattr(CompileHelper, "send", recording)
    return sent


def test_the_helper_compiles_the_leaves_and_this_process_loads_them(tmp_path, monkeypatch):
    sent = _sent(monkeypatch)
    real_claim = compile_helper._claim
    monkeypatch.setattr(compile_helper, "_claim", lambda claims, k, who: who ==
                        compile_helper.HELPER and real_claim(claims, k, who))  # (none here)
    f = _compiled(tmp_path, 2.0)
    leaves = _leaves(f)
    assert {"rows0", "kern0"} <= set(leaves) and set(sent) == set(leaves)  # (not sub0)
    for name, dispatcher in leaves.items():  # loaded from numba's cache, never compiled here
        assert sum(dispatcher.stats.cache_hits.values()) == 1, name
        assert sum(dispatcher.stats.cache_misses.values()) == 0, name


def test_this_process_compiles_the_leaves_the_helper_has_not_started(tmp_path, monkeypatch):
    monkeypatch.setattr(compile_helper, "_serve",
                        lambda *args: os._exit(0) if _idle() else None)
    f = _compiled(tmp_path, 3.0)
    for name, dispatcher in _leaves(f).items():
        assert sum(dispatcher.stats.cache_misses.values()) == 1, name


def _idle() -> bool:
    """A helper that takes nothing: it waits for the end of input, then exits."""
    import time
    time.sleep(5)
    return True


def test_leaves_of_a_failed_helper_are_compiled_here(tmp_path, monkeypatch):
    monkeypatch.setattr(compile_helper, "_claim",
                        lambda claims, k, who: who == compile_helper.HELPER)
    monkeypatch.setattr(compile_helper, "_serve", lambda *args: os._exit(3))  # (dies at once)
    f = _compiled(tmp_path, 4.0)
    for name, dispatcher in _leaves(f).items():
        assert sum(dispatcher.stats.cache_misses.values()) == 1, name


def test_the_switch_keeps_every_compile_in_this_process(tmp_path, monkeypatch):
    sent = _sent(monkeypatch)
    monkeypatch.setattr(vg.config, "compile_processes", False)
    _compiled(tmp_path, 5.0)
    assert sent == []
