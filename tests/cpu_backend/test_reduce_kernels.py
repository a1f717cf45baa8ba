"""Reductions on the CPU backend against the reference: every axis combination, keepdims,
negative axes, dtypes, layouts, empty and size-1 dimensions, NaN/Inf, argmax ties, cumsum."""

import functools
import re

import numpy as np
import pytest

import verglas as vg
from tests.cpu_backend.utils import compare_backend, expect_error, rng
from tests.helpers import random_array, with_layout

AXES = [None, 0, 1, 2, -1, (0, 1), (0, 2), (1, 2), (-3, -1), (), (0, 1, 2)]


@functools.cache
def reductions(dtype):
    """One program: sum over every axis combination (float64: with and without keepdims),
    prod/any/all and cumsum; numba compiles one function per program, so few programs."""
    x = vg.tensor("x", shape=(None, None, None), dtype=dtype)
    full = dtype == "float64"
    outs = [vg.sum(x, axis=axis, keepdims=full and k % 2 == 1) for k, axis in enumerate(AXES)
            if full or k % 3 == 0]
    outs += [vg.prod(x, axis=1), vg.any(x, axis=(0, 2), keepdims=True), vg.all(x),
             vg.cumsum(x), vg.cumsum(x, axis=1)]
    if full:
        outs += [vg.prod(x, axis=(0, -1), keepdims=True), vg.any(x), vg.all(x, axis=0),
                 vg.cumsum(x, axis=0), vg.cumsum(x, axis=-1)]
    return [x], outs


@functools.cache
def extrema(dtype):
    """One program: max/min/argmax/argmin over several axes (non-empty inputs only)."""
    x = vg.tensor("x", shape=(None, None, None), dtype=dtype)
    full = dtype == "float64"
    outs = [vg.max(x, axis=axis, keepdims=k % 2 == 1) for k, axis in enumerate(AXES)
            if full or k % 3 == 1]
    outs += [vg.min(x, axis=(0, 2)), vg.argmax(x, axis=1), vg.argmin(x, keepdims=True)]
    if full:
        outs += [vg.min(x), vg.argmax(x), vg.argmax(x, axis=-1, keepdims=True),
                 vg.argmin(x, axis=0)]
    return [x], outs


DTYPES = ["float32", "float64", "int32", "int64", "bool"]
SHAPES = [(3, 4, 5), (1, 4, 1), (2, 1, 3), (1, 1, 1)]
LAYOUTS = ["C", "F", "reversed", "strided"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_reductions(dtype, shape):
    inputs, outs = reductions(dtype)
    compare_backend(inputs, outs, [random_array(rng(1), dtype, shape)])
    inputs, outs = extrema(dtype)
    compare_backend(inputs, outs, [random_array(rng(2), dtype, shape)])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_reductions_layouts(layout):
    a = with_layout(random_array(rng(3), "float64", (3, 4, 5)), layout)
    for program in (reductions, extrema):
        inputs, outs = program("float64")
        compare_backend(inputs, outs, [a])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_nan_inf(dtype):
    a = random_array(rng(4), dtype, (4, 5, 6), special=True)
    for program in (reductions, extrema):
        inputs, outs = program(dtype)
        compare_backend(inputs, outs, [a])


def test_argmax_ties_and_nan():
    a = np.array([[[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0], [np.nan, 5.0, np.nan, 9.0]]])
    inputs, outs = extrema("float64")
    compare_backend(inputs, outs, [a])
    b = np.array([[[1, 3, 3, 0], [2, 2, 2, 2], [-1, 5, 5, -1]]], dtype="int32")
    inputs, outs = extrema("int32")
    compare_backend(inputs, outs, [b])


@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "uint64"])
def test_argmax_over_blocks_of_long_rows(dtype):
    """Rows longer than a block (reduce_kernels.ARG_BLOCK): the extremum in a later block, a
    tie across blocks (the first wins), -0.0 before 0.0 in another block (they tie), a NaN
    in a later block after an earlier maximum; strided and reversed rows."""
    from verglas.cpu_backend.reduce_kernels import ARG_BLOCK
    n = 2 * ARG_BLOCK + 37
    x = vg.tensor("x", shape=(None, None), dtype=dtype)
    outs = [vg.argmax(x, axis=1), vg.argmin(x, axis=1), vg.argmax(x), vg.argmin(x, axis=0)]
    g = rng(7)
    if dtype.startswith("float"):
        a = g.normal(size=(6, n)).astype(dtype)
        a[1, [5, ARG_BLOCK + 3]] = 9.0  # a tie across blocks
        a[2, :] = -1.0
        a[2, [ARG_BLOCK + 1, 2 * ARG_BLOCK + 4]] = [-0.0, 0.0]
        a[3, [4, ARG_BLOCK + 9]] = [50.0, np.nan]
        a[4, n - 1] = np.inf
        a[5, :] = np.nan
    else:
        info = np.iinfo(dtype)
        a = g.integers(info.min, info.max, size=(6, n), dtype=dtype, endpoint=True)
        a[1, [5, ARG_BLOCK + 3]] = info.max
        a[2, [7, 2 * ARG_BLOCK + 1]] = info.min
    for layout in ("C", "reversed", "strided"):
        compare_backend([x], outs, [with_layout(a, layout)])
    f = vg.compile([x], outs[:1])
    assert re.search(r"= argmax_(f32|f64|int)\d*\(", f.source())


@pytest.mark.parametrize("shape", [(0, 3, 2), (3, 0, 2), (2, 3, 0)])
def test_empty(shape):
    inputs, outs = reductions("float64")
    compare_backend(inputs, outs, [np.zeros(shape)])


@pytest.mark.parametrize("op", ["max", "argmin"])
def test_empty_extremum_raises(op):
    x = vg.tensor("x", shape=(None, None), dtype="float64")
    out = vg.max(x, axis=0) if op == "max" else vg.argmin(x, axis=0)
    name = "Max" if op == "max" else "Argmin"
    expect_error([x], out, [np.zeros((0, 3))], ValueError, name)


def test_large_sums_float32():
    inputs, outs = reductions("float32")
    a = random_array(rng(5), "float32", (7, 300, 33))
    compare_backend(inputs, outs, [a], rtol=1e-4, atol=1e-4)


def test_mean_var_std_of_ints():
    x = vg.tensor("x", shape=(None, None), dtype="int32")
    outs = [vg.mean(x, axis=0), vg.var(x, axis=1), vg.std(x), vg.mean(x, keepdims=True)]
    compare_backend([x], outs, [random_array(rng(6), "int32", (4, 7))])


def test_scalar_input():
    x = vg.tensor("x", shape=(), dtype="float64")
    outs = [vg.sum(x), vg.max(x), vg.argmax(x), vg.cumsum(x)]
    compare_backend([x], outs, [np.array(2.5)])
