"""Indexing on the CPU backend against the reference: basic (negative ints and steps,
symbolic bounds, newaxis), advanced (integer arrays, masks, mixed with slices, repeated
indices), set/inc_subtensor, and IndexError naming the op out of bounds."""

import functools

import numpy as np
import pytest

import verglas as vg
from tests.cpu_backend.utils import compare_backend, compile_pair, expect_error, rng
from tests.helpers import random_array, with_layout


@functools.cache
def basic_program():
    x = vg.tensor("x", shape=(None, None, None), dtype="float64")
    i = vg.scalar("i", dtype="int64")
    j = vg.scalar("j", dtype="int32")
    outs = [x[0], x[-1, :, 1], x[i], x[:, i:j], x[::-1, ::-2, 1:], x[i:, None, ::j],
            x[-2:0:-1, :, i] * 1.0, x[None, ..., 0], x[i, j, -1], x[1:i:2].sum(axis=0),
            vg.set_subtensor(x[i], 0.0), vg.inc_subtensor(x[:, ::-1], x[0]),
            vg.inc_subtensor(x[-1, j, 1:], 5.0), vg.set_subtensor(x[:, None, 0], x[1, None, 1]),
            vg.inc_subtensor(x[0, 0, 0], 1.5)]
    return [x, i, j], outs


@pytest.mark.parametrize("layout", ["C", "F", "reversed"])
@pytest.mark.parametrize("i, j", [(1, 2), (-2, -1), (0, 3), (2, -4)])
def test_basic_indexing(layout, i, j):
    inputs, outs = basic_program()
    x = with_layout(random_array(rng(0), "float64", (3, 4, 5)), layout)
    compare_backend(inputs, outs, [x, np.int64(i), np.int32(j)])


@pytest.mark.parametrize("i, j", [(3, 1), (-4, 1), (0, 4), (0, -5)])
def test_basic_out_of_bounds(i, j):
    inputs, outs = basic_program()
    x = random_array(rng(0), "float64", (3, 4, 5))
    expect_error(inputs, outs, [x, np.int64(i), np.int32(j)], IndexError, "ubtensor")


def test_zero_step():
    x = vg.tensor("x", shape=(None,), dtype="float64")
    s = vg.scalar("s", dtype="int64")
    expect_error([x, s], x[::s], [np.ones(3), np.int64(0)], ValueError, "Subtensor")


@functools.cache
def advanced_program(dtype):
    x = vg.tensor("x", shape=(None, None, None), dtype=dtype)
    idx = vg.tensor("idx", shape=(None,), dtype="int64")
    idx2 = vg.tensor("idx2", shape=(None, None), dtype="int32")
    m = vg.tensor("m", shape=(None, None), dtype="bool")
    mv = vg.tensor("mv", shape=(None,), dtype="bool")
    outs = [x[idx], x[:, idx], x[idx, 1:, idx], x[1, :, idx], x[idx2], x[::-1, idx2, ::2],
            x[m], x[:, mv], x[1, None, mv], x[..., idx], x[idx2, :, idx2], x[[0, -1, 0]],
            vg.set_subtensor(x[idx], x[0]), vg.inc_subtensor(x[idx], x[-1]),
            vg.inc_subtensor(x[:, idx, 1:], x[0, :1, 1:]), vg.set_subtensor(x[m], x[0, 0]),
            vg.inc_subtensor(x[idx2, 0], x[0, 0]), vg.set_subtensor(x[:, mv, -1], x[0, mv, 0])]
    return [x, idx, idx2, m, mv], outs


def _advanced_arrays(dtype, idx, idx2, seed=0):
    g = rng(seed)
    x = random_array(g, dtype, (3, 4, 5))
    m = np.zeros((3, 4), bool)
    m[[0, 2, 2], [1, 0, 3]] = True
    mv = np.array([True, False, True, True])
    return [x, np.array(idx, "int64"), np.array(idx2, "int32"), m, mv]


@pytest.mark.parametrize("dtype", ["float64", "float32", "int32", "bool"])
@pytest.mark.parametrize("idx, idx2", [
    ([0, 2, -1], [[0, 1], [2, -3]]),
    ([1, 1, 1], [[2, 2, 2]]),  # repeated indices: set keeps the last, inc accumulates
    ([], np.zeros((0, 2))),
])
def test_advanced_indexing(dtype, idx, idx2):
    inputs, outs = advanced_program(dtype)
    compare_backend(inputs, outs, _advanced_arrays(dtype, idx, idx2))


def test_advanced_strided_input():
    inputs, outs = advanced_program("float64")
    arrays = _advanced_arrays("float64", [2, -1], [[1, 0]])
    arrays[0] = with_layout(arrays[0], "reversed")
    arrays[1] = with_layout(np.array([2, 0, -1, 1]), "strided")
    compare_backend(inputs, outs, arrays)


@pytest.mark.parametrize("idx, idx2", [([0, 3], [[0]]), ([-4], [[0]]), ([0], [[3]])])
def test_advanced_out_of_bounds(idx, idx2):
    inputs, outs = advanced_program("float64")
    expect_error(inputs, outs, _advanced_arrays("float64", idx, idx2), IndexError,
                 "AdvancedSubtensor|AdvancedIncSubtensor")


def test_mask_shape_mismatch():
    x = vg.tensor("x", shape=(None, None), dtype="float64")
    m = vg.tensor("m", shape=(None,), dtype="bool")
    expect_error([x, m], x[m], [np.ones((3, 2)), np.ones(2, bool)], IndexError,
                 "AdvancedSubtensor")


def test_set_value_shape_error():
    x = vg.tensor("x", shape=(None, None), dtype="float64")
    v = vg.tensor("v", shape=(None,), dtype="float64")
    expect_error([x, v], vg.set_subtensor(x[1:], v), [np.ones((3, 2)), np.ones(3)], ValueError,
                 "IncSubtensor")


def test_an_inplace_scatter_into_zeros_does_not_copy_its_target():
    """The embedding gradient: zeros, then rows added at ids, in place. The scatter's result is
    the zeros' own array: no copy of it onto itself (10 MB a call, 1.46 -> 0.35 ms)."""
    table = vg.tensor("table", shape=(None, None), dtype="float32")
    ids = vg.tensor("ids", shape=(None,), dtype="int64")
    d = vg.tensor("d", shape=(None, None), dtype="float32")
    g = rng(12)
    arrays = [g.normal(size=(6, 3)).astype("float32"), np.array([0, 5, 0, 2]),
              g.normal(size=(4, 3)).astype("float32")]
    for out in [vg.inc_subtensor(vg.zeros_like(table)[ids], d),
                vg.set_subtensor(vg.zeros_like(table)[1:3], d[:2])]:
        fast, _ = compile_pair([table, ids, d], [out])
        assert fast._runner.text.count("[...] =") == 0  # (the set writes in loops of its own)
        compare_backend([table, ids, d], [out], arrays)


@functools.cache
def rows_program():
    """Rows picked by one integer array (an embedding's lookup and its gradient's scatter):
    copied row by row (index_kernels._row_indexing)."""
    t = vg.tensor("t", shape=(None, None, None), dtype="float32")
    m = vg.tensor("m", shape=(None, None), dtype="int16")
    ids = vg.tensor("ids", shape=(None,), dtype="int64")
    ids2 = vg.tensor("ids2", shape=(None, None), dtype="int32")
    v = vg.tensor("v", shape=(None, None, None), dtype="float64")
    w = vg.tensor("w", shape=(None, None), dtype="float32")
    outs = [t[ids], t[ids2] * 2, m[ids], vg.inc_subtensor(vg.zeros_like(t)[ids], t[ids] * 3),
            vg.set_subtensor(t[ids], t[ids][::-1] + 1), vg.inc_subtensor(m[ids], m[ids]),
            vg.inc_subtensor(t[ids], v), vg.inc_subtensor(t[ids], w),
            t.transpose(1, 0, 2)[ids % 3]]  # (a strided table: the general loops)
    return [t, m, ids, ids2, v, w], outs


@pytest.mark.parametrize("n", [6, 1, 0])
def test_rows_picked_by_an_index_array(n):
    inputs, outs = rows_program()
    g = rng(5)
    t = g.standard_normal((4, 3, 5)).astype("float32")
    m = g.integers(-9, 9, (4, 7)).astype("int16")
    ids = g.integers(-4, 4, n)  # (repeated and negative: incs add up, sets keep the last)
    ids2 = g.integers(-4, 4, (n, 2)).astype("int32")
    v = g.standard_normal((n, 3, 5))
    w = g.standard_normal((3, 5)).astype("float32")  # (broadcast: the general loops)
    compare_backend(inputs, outs, [t, m, ids, ids2, v, w])
    compare_backend(inputs, outs, [t, m, ids, ids2, v[:, :1], w])  # (broadcast at run time)
    if n:
        source = compile_pair(inputs, outs)[0].source()
        # (two rows a loop: the 3 distinct gathers, the 4 updates of a value of their shape)
        assert source.count("c_row0(") == 2 * 7


def test_rows_out_of_bounds_name_the_op():
    inputs, outs = rows_program()
    t, m = np.zeros((4, 3, 5), "float32"), np.zeros((4, 7), "int16")
    arrays = [t, m, np.array([0, 4]), np.zeros((1, 2), "int32"), np.zeros((2, 3, 5)),
              np.zeros((3, 5), "float32")]
    expect_error(inputs, outs, arrays, IndexError, "AdvancedSubtensor")


@pytest.mark.parametrize("shape", [(3, 4), (0, 5), (1, 1), (6, 0)])
def test_new_axes_of_a_contiguous_array_are_a_c_view(shape):
    """x[:, None, :] and x[None, ..., None] of a C-contiguous array are C views (numba types
    a slice 'A', and a loop over its last axis does not vectorize); of a transposed view, a
    slice as before. Values and shapes are numpy's either way."""
    x = vg.tensor("x", shape=(None, None), dtype="float32")
    outs = [x[:, None, :] * 2, x[None, :, :, None] + 1, x.T[:, None, :] - 1]
    fast, _ = compile_pair([x], outs)
    text = fast._runner.text
    assert text.count("[::, None, ::]") == 1  # the transposed view's
    xv = random_array(rng(3), "float32", shape, special=True)
    got = fast(xv)
    for g, w in zip(got, [xv[:, None, :] * 2, xv[None, :, :, None] + 1, xv.T[:, None, :] - 1]):
        assert g.shape == w.shape
        np.testing.assert_array_equal(g, w)
