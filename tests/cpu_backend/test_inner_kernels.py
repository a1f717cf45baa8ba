"""OpFromGraph and Scan on the CPU backend: sub-programs compiled once, the loop in compiled
code, every output kind, n_steps 0, and run-time errors naming the op."""

import functools
import re

import numpy as np
import pytest

import verglas as vg
from tests.cpu_backend.utils import compare_backend, compile_pair, expect_error, rng


@functools.cache
def ofg_program():
    a = vg.tensor("a", shape=(None, None), dtype="float64")
    b = vg.tensor("b", shape=(None, None), dtype="float64")
    op = vg.OpFromGraph([a, b], [vg.exp(a) @ b, vg.sum(a * b, axis=0)])
    x = vg.tensor("x", shape=(None, None), dtype="float64")
    y = vg.tensor("y", shape=(None, None), dtype="float64")
    p, q = op(x, y)
    r, s = op(x.T, y[::-1])  # the same op on strided views
    return [x, y], [p + r, q, s]


def test_op_from_graph_used_twice():
    inputs, outs = ofg_program()
    g = rng(0)
    compare_backend(inputs, outs, [g.normal(size=(3, 3)), g.normal(size=(3, 3))])
    fast, _ = compile_pair(inputs, outs)
    source = fast._runner.text
    assert source.count("def sub") == 1  # one function for the one distinct sub-program
    assert len(re.findall(r"= call\d+\(sub", source)) == 2  # called twice


@functools.cache
def scan_program():
    seq = vg.tensor("seq", shape=(None, 3), dtype="float64")
    h0 = vg.tensor("h0", shape=(3,), dtype="float64")
    f0 = vg.tensor("f0", shape=(2,), dtype="float64")
    w = vg.tensor("w", shape=(3, 3), dtype="float64")
    n = vg.scalar("n", dtype="int64")

    def step(x_t, x_t2, fib2, fib1, h, w):
        h_new = vg.tanh(x_t @ w + h + x_t2)
        return fib1 + fib2, h_new, vg.sum(h_new * x_t)

    fib, hs, sums = vg.scan(step, sequences=[dict(input=seq, taps=[0, 2])],
                            outputs_info=[dict(initial=f0, taps=[-2, -1]), h0, None],
                            non_sequences=[w], n_steps=n)
    counts = vg.scan(lambda c: c + 1, outputs_info=[vg.as_tensor(np.int64(0))], n_steps=n)
    return [seq, h0, f0, w, n], [fib, hs, sums, counts]


@pytest.mark.parametrize("n", [0, 1, 5])
def test_scan_output_kinds(n):
    inputs, outs = scan_program()
    g = rng(1)
    arrays = [g.normal(size=(7, 3)), g.normal(size=3), np.array([1.0, 1.0]),
              g.normal(size=(3, 3)), np.int64(n)]
    compare_backend(inputs, outs, arrays)


def test_scan_errors():
    inputs, outs = scan_program()
    g = rng(2)
    arrays = [g.normal(size=(4, 3)), g.normal(size=3), np.array([1.0, 1.0]),
              g.normal(size=(3, 3)), np.int64(3)]
    expect_error(inputs, outs, arrays, ValueError, "Scan")  # the sequence is too short
    arrays[-1] = np.int64(-1)
    expect_error(inputs, outs, arrays, ValueError, "Scan")
