"""Elementwise kernels under the simulator: broadcasting, layouts, specials, dtypes, sizes."""

import numpy as np
import pytest

import verglas as vg
from tests.cuda.compare import compare_cuda
from tests.helpers import random_array, with_layout

RNG = np.random.default_rng(1234)


def test_broadcast_composite():
    a = random_array(RNG, "float32", (3, 1, 4))
    b = random_array(RNG, "float32", (1, 5, 1))
    compare_cuda(lambda x, y: vg.tanh(x * y + 1.5) - vg.exp(y) / 2, [a, b])


def test_broadcast_lower_rank_and_scalar_input():
    a = random_array(RNG, "float64", (4, 6))
    b = random_array(RNG, "float64", (6,))
    c = np.float64(0.25)
    compare_cuda(lambda x, y, z: vg.maximum(x, y) * z + vg.sigmoid(x), [a, b, np.asarray(c)])


@pytest.mark.parametrize("layout", ["F", "strided", "reversed"])
def test_non_contiguous_inputs(layout):
    a = with_layout(random_array(RNG, "float32", (5, 7)), layout)
    b = with_layout(random_array(RNG, "float32", (5, 7)), layout)
    compare_cuda(lambda x, y: vg.sqrt(vg.abs(x)) + y * 3, [a, b])


def test_transposed_view_input_and_output_view():
    a = random_array(RNG, "float64", (6, 4))
    compare_cuda(lambda x: [vg.exp(x.T) + x.T, (x * 2)[::-1, 1:]], [a])


def test_nan_inf():
    a = random_array(RNG, "float64", (8, 9), special=True)
    b = random_array(RNG, "float64", (8, 9), special=True)
    compare_cuda(lambda x, y: [vg.maximum(x, y), vg.minimum(x, y), vg.where(vg.isnan(x), y, x),
                               vg.exp(x) + vg.tanh(y), vg.log(vg.abs(x)), vg.isinf(y)], [a, b])


def test_integer_dtypes():
    a = random_array(RNG, "int32", (4, 5), low=-20, high=20)
    b = random_array(RNG, "int64", (4, 5), low=1, high=7)
    compare_cuda(lambda x, y: [x + y, x // y, x % y, x * 3 - 1, (x & 6) | 1, x < y,
                               vg.abs(x), x.astype("float32") / 2], [a, b])


def test_bool_dtype():
    a = RNG.random((3, 4)) < 0.5
    b = RNG.random((3, 4)) < 0.5
    compare_cuda(lambda x, y: [x & y, x | ~y, vg.where(x, 1.0, -1.0), x + y], [a, b])


@pytest.mark.parametrize("shape", [(0, 3), (3, 0), (1, 1), (1, 5), ()])
def test_empty_size1_and_0d(shape):
    a = random_array(RNG, "float32", shape)
    b = random_array(RNG, "float32", shape)
    compare_cuda(lambda x, y: vg.exp(x) * y + 1, [a, b])


def test_static_shapes_and_constants():
    a = random_array(RNG, "float32", (2, 3))
    const = np.arange(3, dtype="float32")
    compare_cuda(lambda x: x * vg.constant(const) + np.float32(2), [a], static_shapes=[(2, 3)])


def test_broadcast_error_names_the_op():
    f = vg.compile(list(xs := [vg.tensor("x", (None,)), vg.tensor("y", (None,))]),
                   xs[0] + xs[1], device="cuda")
    with pytest.raises(ValueError, match="broadcast"):
        f(np.zeros(3), np.zeros(4))


def test_repeated_calls_reuse_kernels():
    a = random_array(RNG, "float32", (4, 4))
    f = compare_cuda(lambda x: vg.exp(x) - 1, [a], calls=3)
    assert "def program" in f._runner.text


def test_element_reads_inside_kernels():
    """a[3], m[1, -1] read by elementwise kernels and a row kernel (the scheduler folds the
    one-element reads into the steps that use them); an index out of bounds is an IndexError."""
    a = random_array(RNG, "float64", (6,))
    m = random_array(RNG, "float64", (4, 5))
    compare_cuda(lambda x, y: x * y[1, -1] + y[0, 0] * x[-2] + vg.sin(x + x[3]), [a, m])
    compare_cuda(lambda y, x: vg.softmax(y * x[2], axis=1) + x[-1], [m, a])
    x = vg.tensor("x", (None,), "float64")
    f = vg.compile([x], x * x[5], device="cuda")
    with pytest.raises(IndexError, match="out of bounds"):
        f(np.ones(3))


def test_element_reads_of_steps_run_on_the_host():
    """A one-element step whose inputs are on the host runs its reference perform there: it
    received the whole array an element read reads from (fuzzer-sim seeds 348, 730)."""
    a = random_array(RNG, "int8", (4,))
    compare_cuda(lambda x: vg.reshape(vg.neq(np.uint16(39131), x[-4]), (1, 1, 1)), [a])
    b = random_array(RNG, "float64", (5,))
    compare_cuda(lambda x: vg.concatenate([x, vg.expand_dims(x[1] * 2, 0)], axis=0), [b])


def test_source_shows_host_code_and_kernels():
    x = vg.tensor("x", (None,), "float32")
    f = vg.compile([x], vg.exp(x) * 2 + vg.constant(np.arange(3, dtype="float32")),
                   device="cuda")
    src = f.source()
    assert "def program(L, in0" in src and "# K0 = " in src and "cuda.grid" in src
    assert src.endswith(f._runner.text + "\n") and "launcher" in src


@pytest.mark.parametrize("n", [0, 1, 3, 511, 512, 513, 515, 2053])
def test_unrolled_loops_cover_every_element_once(n):
    """Flat maps and row reductions load UNROLL elements a trip, then finish one at a time
    (the simulator's grid is 4 blocks of 32 threads: a trip covers 512 elements)."""
    a = random_array(RNG, "float64", (n,))  # (float32 sums in another order: 1e-5 off)
    b = random_array(RNG, "int16", (n,))
    compare_cuda(lambda x, y: [x * 2 + y, vg.sum(x), vg.max(y) if n else vg.sum(y),
                               vg.sum(vg.exp(x).reshape((1, n)), axis=1)], [a, b])
