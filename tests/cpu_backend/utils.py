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
from tests.helpers import check_call, default_tolerance

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


def _tolerance(dtype):
    """numpy's tolerance, float32 a little looser: kernels may sum in another order."""
    return (2e-5, 1e-5) if np.dtype(dtype) == np.float32 else default_tolerance(dtype)


def compare_backend(inputs, outputs, arrays, rtol=None, atol=None):
    """Run the cpu and reference compilations of inputs -> outputs on `arrays` and compare
    (tests.helpers.check_call). Returns the cpu results (a list)."""
    fast, ref = compile_pair(inputs, outputs)
    copies = [np.array(a, copy=True) for a in arrays]
    with np.errstate(all="ignore"):
        expected = ref(*copies)
        got = fast(*arrays)
    single = not isinstance(outputs, (list, tuple))
    got_l, exp_l = ([got], [expected]) if single else (list(got), list(expected))
    check_call(arrays, copies, got_l, exp_l, rtol, atol, tolerance=_tolerance)
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
