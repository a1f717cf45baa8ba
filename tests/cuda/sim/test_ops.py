"""Indexing, cumsum, matmul, constructors, an MLP with its gradient, errors (simulator)."""

import numpy as np
import pytest

import verglas as vg
from verglas.ops.scan import scan_buffers
from tests.cuda.compare import compare_cuda, symbolic_inputs
from tests.helpers import random_array

RNG = np.random.default_rng(7)


def test_gather():
    a = random_array(RNG, "float32", (5, 4, 3))
    idx = np.array([2, 0, -1, 2, 1])
    compare_cuda(lambda x, i: [x[i], x[:, i[:3]], x[1:4, i[:2], 1], x[i[:2], :, i[1:3]],
                               x[::-1, 1:][i[2:4]]], [a, idx])


def test_gather_out_of_bounds_raises_index_error():
    x, i = symbolic_inputs([np.zeros((3, 2)), np.zeros(2, "int64")])
    f = vg.compile([x, i], x[i], device="cuda")
    with pytest.raises(IndexError):
        f(np.zeros((3, 2)), np.array([0, 3]))


def test_scatter_repeated_indices_accumulate():
    a = random_array(RNG, "float64", (6, 3))
    v = random_array(RNG, "float64", (7, 3))
    idx = np.array([1, 1, 5, 1, 0, 5, -1])
    compare_cuda(lambda x, y, i: [vg.inc_subtensor(x[i], y), vg.inc_subtensor(x[i, 2], 1.0)],
                 [a, v, idx])


def test_scatter_int_and_set():
    a = random_array(RNG, "int64", (8,), low=0, high=10)
    idx = np.array([7, 0, 3])
    compare_cuda(lambda x, i: [vg.inc_subtensor(x[i], 2), vg.set_subtensor(x[i], -1)],
                 [a, idx])


def test_basic_set_and_inc_subtensor():
    a = random_array(RNG, "float32", (4, 6))
    v = random_array(RNG, "float32", (3,))
    compare_cuda(lambda x, y: [vg.inc_subtensor(x[1:, ::2], y), vg.set_subtensor(x[0], 5.0),
                               vg.set_subtensor(x[2, 3], 1.0)], [a, v])


def test_boolean_masks_run_on_the_device():
    """A mask is compacted on the device (its nonzero()) and indexes as integer arrays do:
    no host fallback; a mask whose shape does not match is numpy's IndexError."""
    a = random_array(RNG, "float64", (10,))
    m = random_array(RNG, "float32", (4, 5))
    f = compare_cuda(lambda x, y: [x[x > 0] * 2, y[y > 0.5], y[1:, y[0] > 0],
                                   vg.set_subtensor(y[y < 0], 0.0),
                                   vg.inc_subtensor(x[x > 0.5], 1.0), x[x > 100]],
                     [a, m])
    assert not f._runner.generated.fallbacks
    x, mask = symbolic_inputs([np.zeros(10), np.zeros(9, bool)])
    g = vg.compile([x, mask], x[mask], device="cuda")
    with pytest.raises(IndexError, match="boolean index did not match"):
        g(np.zeros(10), np.ones(9, bool))


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_cumsum(axis):
    a = random_array(RNG, "int32", (4, 5), low=-9, high=9)
    b = random_array(RNG, "float64", (4, 5))
    compare_cuda(lambda x, y: [vg.cumsum(x, axis=axis), vg.cumsum(y.T, axis=axis)], [a, b])


def test_matmul():
    a = random_array(RNG, "float32", (2, 3, 4))
    b = random_array(RNG, "float32", (4, 5))
    c = random_array(RNG, "float64", (4,))
    compare_cuda(lambda x, y, z: [x @ y, vg.tanh(x @ y) + 1, vg.dot(y.T, z.astype("float32"))],
                 [a, b, c], atol=1e-5)


def test_constructors():
    a = random_array(RNG, "float32", (3, 4))
    compare_cuda(lambda x: [vg.zeros((x.shape[0], 2)), vg.full((2, x.shape[1]), 7, "int32"),
                            vg.broadcast_to(x[0], (5, x.shape[1])),
                            vg.concatenate([x, x * 2], axis=1), vg.stack([x, x + 1], axis=0),
                            vg.arange(x.shape[0]), vg.arange(0.5, x.shape[1], 0.75)], [a])


def test_mlp_forward_and_gradient():
    xs = random_array(RNG, "float64", (8, 4), low=-1, high=1)
    w1 = random_array(RNG, "float64", (4, 6), low=-1, high=1)
    b1 = random_array(RNG, "float64", (6,), low=-1, high=1)
    w2 = random_array(RNG, "float64", (6, 3), low=-1, high=1)
    labels = np.array([0, 2, 1, 1, 0, 2, 2, 0])

    def build(x, W1, B1, W2, y):
        h = vg.tanh(x @ W1 + B1)
        logits = h @ W2
        logp = vg.log_softmax(logits, axis=1)
        loss = -vg.mean(logp[vg.arange(y.shape[0]), y])
        return [loss, *vg.grad(loss, [W1, B1, W2])]

    compare_cuda(build, [xs, w1, b1, w2, labels])


def test_inputs_never_modified_even_when_inplace():
    a = random_array(RNG, "float64", (5, 5))
    f = compare_cuda(lambda x: vg.exp(vg.tanh(x) * 2) + x, [a], calls=2)
    assert f._runner.generated.capturable


def test_wrong_dtype_and_ndim():
    x, = symbolic_inputs([np.zeros((2, 2), "float32")])
    f = vg.compile([x], x + 1, device="cuda")
    with pytest.raises(TypeError):
        f(np.zeros((2, 2), "float64"))
    with pytest.raises(TypeError):
        f(np.zeros(2, "float32"))


def test_loops_with_a_stopping_condition():
    compare_cuda(lambda x0, v: [vg.scan(lambda x: (x * 2, vg.until(x * 2 > 100)),
                                        outputs_info=x0, n_steps=50),
                                vg.scan(lambda h: ([h * 1.5 + 0.1, vg.sum(h)],
                                                   vg.until(vg.sum(h * h) > 50.0)),
                                        outputs_info=[v, None], n_steps=30)[1]],
                 [np.array(3.0), np.ones(3)])


def test_scan_and_opfromgraph_run_on_the_device():
    """A Scan (sit-sot, mit-sot taps, nit-sot, a sequence with two offsets) and its pullback,
    an OpFromGraph used twice: host-driven loops and sub-program calls, no host fallback."""
    def program(h0, u, w, m0):
        hs = vg.scan(lambda u_t, h: vg.tanh(h @ w + u_t), sequences=[u], outputs_info=[h0])
        fib = vg.scan(lambda a, b, x0, x1: a + b * 0.5 + x1 - x0,
                      sequences=[dict(input=u[:, 0], taps=[0, 1])],
                      outputs_info=[dict(initial=m0, taps=[-2, -1])])
        layer = vg.OpFromGraph([h0, w], [vg.exp(h0 @ w) * 0.1, vg.sum(h0)])
        y, s = layer(*layer(h0, w)[:1], w)
        return [hs, fib, y, s, *vg.grad(vg.sum(hs ** 2) + vg.sum(y), [h0, w])]

    f = compare_cuda(program, [RNG.standard_normal(3), RNG.standard_normal((6, 3)),
                               RNG.standard_normal((3, 3)) * 0.5, RNG.standard_normal(2)])
    assert not f._runner.generated.fallbacks


def test_a_gradient_through_a_loop_of_no_step():
    """The x-gradient of a loop of no step has x's shape (its rows' lengths from the inputs')."""
    def program(h0, u, w):
        hs = vg.scan(lambda u_t, h: vg.tanh(h @ w + u_t), sequences=[u], outputs_info=[h0])
        return vg.grad(vg.sum(hs ** 2), [h0, u, w])

    compare_cuda(program, [RNG.standard_normal(3), np.zeros((0, 3)), RNG.standard_normal((3, 3))])


def test_an_elementwise_loop_that_runs_backwards_is_one_kernel():
    """A loop over its sequences last to first (a gradient's) with an elementwise body runs as
    one kernel, each thread reading row n - 1 - t at step t and writing its collected row
    there; the host-driven loop does the same where the kernel does not fit."""
    def program(h0, u, w):
        (hs, ys), _ = scan_buffers(lambda u_t, h: [0.5 * h + u_t * w, h * u_t],
                                   sequences=[u], outputs_info=[h0, None], backwards=True)
        return [hs, ys]

    args = [RNG.standard_normal(4), RNG.standard_normal((30, 4)), RNG.standard_normal(4)]
    f = compare_cuda(program, args, static_shapes=[(4,), (None, 4), (4,)])
    assert f._runner.generated.text.count("H.run_scan_elementwise(") == 1
    compare_cuda(program, [*args[:2], RNG.standard_normal(1)])  # w broadcasts: the host loop


def test_an_elementwise_loop_is_one_kernel():
    """A Scan whose body is elementwise over its states runs as one kernel (each thread
    carries its elements through every step): scalar and vector states, per-step scalars,
    non-sequences, a collected output, the last entry only, float16; an operand that
    broadcasts along a length-1 axis at run time takes the host loop instead."""
    def program(x0, u, v, w, s, c):
        xs = vg.scan(lambda u_t, x: 0.5 * x + u_t, sequences=[u], outputs_info=[x0])
        hs, ys = vg.scan(lambda s_t, h: [vg.tanh(h * w + s_t) + c, h * h],
                         sequences=[s], outputs_info=[v, None])
        last = vg.scan(lambda s_t, h: h * 0.9 + s_t * w, sequences=[s], outputs_info=[v])[-1]
        return [xs, hs, ys, last]

    args = [np.array(0.3), RNG.standard_normal(40), RNG.standard_normal(5),
            RNG.standard_normal(5), RNG.standard_normal((40, 5)), np.array(0.25)]
    f = compare_cuda(program, args)
    text = f._runner.generated.text  # (the two loops over s are merged: one)
    assert text.count("H.run_scan_elementwise(") == 2 and "H.run_scan(" not in text, text
    compare_cuda(program, [*args[:3], RNG.standard_normal(1), *args[4:]])  # w broadcasts
    compare_cuda(lambda h, z: vg.scan(lambda z_t, a: a * 0.5 + z_t, sequences=[z],
                                      outputs_info=[h]),
                 [RNG.standard_normal(3).astype("float16"),
                  RNG.standard_normal((6, 3)).astype("float16")])


def test_set_with_repeated_indices_keeps_the_last_value():
    """numpy's x[i] = v keeps the last value an element is given (fuzzer seed 201 on an H100
    kept another one): each element's last writer is claimed, then only it writes."""
    a = random_array(RNG, "float64", (5, 3))
    idx = np.array([0, 2, 0, 4, 0, 2])
    v = random_array(RNG, "float64", (6, 3))
    compare_cuda(lambda x, i, y: [vg.set_subtensor(x[i], y), vg.set_subtensor(x[i, 1], y[:, 0]),
                                  vg.set_subtensor(x[np.array([[1, 1], [3, 1]]), 0], -1.0)],
                 [a, idx, v])


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int16", "bool", "float16"])
def test_scatter_add_without_an_atomic_of_its_dtype(dtype):
    """x[i] += v for dtypes with no atomic add accumulates in a wider one (wraparound and
    bool's "or" as numpy's np.add.at), no host fallback."""
    a = random_array(RNG, dtype, (6, 2))
    v = random_array(RNG, dtype, (7, 2))
    idx = np.array([0, 5, 0, 0, 3, 5, 0])
    f = compare_cuda(lambda x, i, y: vg.inc_subtensor(x[i], y), [a, idx, v])
    assert not f._runner.generated.fallbacks


def test_complex_scatter_add_adds_its_parts():
    a = random_array(RNG, "complex128", (5, 2))
    v = random_array(RNG, "complex128", (6, 2))
    w = random_array(RNG, "float32", (6, 2))
    idx = np.array([0, 4, 0, 2, 0, 4])
    z = random_array(RNG, "complex64", (5, 2))
    f = compare_cuda(lambda x, i, y, r, c: [vg.inc_subtensor(x[i], y), vg.inc_subtensor(x[i], r),
                                            vg.inc_subtensor(c[i], y.astype("complex64"))],
                     [a, idx, v, w, z])
    assert not f._runner.generated.fallbacks
