"""Shared helpers of the CPU backend tests: compile a graph once with device="cpu" and with
the reference executor, run both on the same inputs and compare.

Compiling with numba costs ~0.5 s per program, so compiled pairs are cached per graph
(fingerprint): tests build a graph once and parametrize the input values.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import verglas as vg
from verglas.graph.frozen import freeze
from tests.helpers import assert_like_numpy

__all__ = ["calls_in_threads", "compare_backend", "compile_pair", "expect_error", "rng"]

_PAIRS: dict = {}


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def compile_pair(inputs, outputs):
    """(cpu Function, reference Function) of the graph, compiled once per process."""
    key = freeze(list(inputs), list(outputs) if isinstance(outputs, (list, tuple))
                 else [outputs]).fingerprint()
    pair = _PAIRS.get(key)
    if pair is None:
        pair = _PAIRS[key] = (vg.compile(inputs, outputs, device="cpu", mode="fast_run"),
                              vg.compile(inputs, outputs, mode="reference"))
    return pair


def _float32_tolerance(dtype):
    return (2e-5, 1e-5) if np.dtype(dtype) == np.float32 else (None, None)


def compare_backend(inputs, outputs, arrays, rtol=None, atol=None):
    """Run the cpu and reference compilations of inputs -> outputs on `arrays` and compare.

    Dtypes must match exactly, values within tolerance (NaNs equal; float32 a little looser,
    as the kernels may sum in another order than numpy). Asserts the inputs are unchanged and
    the outputs are fresh, writable arrays. Returns the cpu results (a list).
    """
    fast, ref = compile_pair(inputs, outputs)
    copies = [np.array(a, copy=True) for a in arrays]
    with np.errstate(all="ignore"):
        expected = ref(*copies)
        got = fast(*arrays)
    for a, c in zip(arrays, copies):
        np.testing.assert_array_equal(a, c, err_msg="an input was modified")
    single = not isinstance(outputs, (list, tuple))
    got_l, exp_l = ([got], [expected]) if single else (list(got), list(expected))
    assert len(got_l) == len(exp_l)
    for k, (g, e) in enumerate(zip(got_l, exp_l)):
        r, a = _float32_tolerance(e.dtype)
        assert_like_numpy(g, e, rtol if rtol is not None else r, atol if atol is not None else a,
                          label=f"output {k}: ")
        assert g.flags.writeable, f"output {k} is read-only"
        for x in arrays:
            assert not np.shares_memory(g, x), f"output {k} aliases an input"
        for j, other in enumerate(got_l[:k]):
            assert not np.shares_memory(g, other), f"outputs {j} and {k} alias"
    return got_l


def expect_error(inputs, outputs, arrays, exc, match):
    """Both compilations raise `exc` whose message matches `match` (e.g. the op's name)."""
    fast, ref = compile_pair(inputs, outputs)
    with pytest.raises(exc, match=match):
        ref(*arrays)
    with pytest.raises(exc, match=match):
        fast(*arrays)


def calls_in_threads(fast, data, expected, calls, **tolerance):
    """8 threads, thread k calling `fast(*data[k])` `calls` times at once with the others;
    every result must match `expected[k]` (a list of arrays)."""
    errors = []

    def work(k):
        try:
            for _ in range(calls):
                for g, e in zip(fast(*data[k]), expected[k]):
                    np.testing.assert_allclose(g, e, **tolerance)
        except Exception as exc:  # reported below: a thread's assert does not fail the test
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(data))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
