"""Shape ops and matrix products on the CPU backend against the reference: reshape (-1,
strided inputs, errors), alloc/broadcast_to/full, concatenate/stack, arange, matmul (2-d,
1-d, batched with broadcasting, integer, bool, mixed dtypes, empty; float products' operand
layouts: transposed, strided, reversed, length-1 axes, gemm's stride rules), softmax & co."""

import functools
import re

import numpy as np
import pytest

import verglas as vg
from tests.cpu_backend.utils import compare_backend, compile_pair, expect_error, rng
from tests.helpers import random_array, with_layout


@functools.cache
def shape_program():
    x = vg.tensor("x", shape=(None, None), dtype="float64")
    n = vg.scalar("n", dtype="int64")
    outs = [vg.reshape(x, (-1,)), vg.reshape(x, (2, -1)), vg.reshape(x.T, (-1, 2)) * 1.0,
            vg.reshape(x, (n, -1)) + 1.0, vg.broadcast_to(x[0], (3, x.shape[0], x.shape[1])),
            vg.zeros((n, 2), dtype="int32"), vg.full((2, n), 1.5), vg.ones_like(x),
            vg.broadcast_to(x[:, :1], (x.shape[0], 4)),
            vg.concatenate([x, x[::-1] * 2.0, x[:1]], axis=0),
            vg.concatenate([x, vg.zeros((x.shape[0], 1), dtype="int32")], axis=1),
            vg.stack([x, x.T.T * 3.0], axis=1), vg.stack([x[0], x[1]], axis=-1),
            vg.arange(n), vg.arange(1, n, 2), vg.arange(n, -1, -3, dtype="float32"),
            vg.arange(0.5, n, 0.25), vg.arange(5)]
    return [x, n], outs


@pytest.mark.parametrize("layout", ["C", "F", "reversed", "strided"])
def test_shape_ops(layout):
    inputs, outs = shape_program()
    x = with_layout(random_array(rng(0), "float64", (4, 6)), layout)
    compare_backend(inputs, outs, [x, np.int64(2)])


def test_shape_ops_errors():
    inputs, outs = shape_program()
    x = random_array(rng(0), "float64", (4, 6))
    expect_error(inputs, outs, [x, np.int64(5)], ValueError, "Reshape")
    x = vg.tensor("x", shape=(None,), dtype="float64")
    n = vg.scalar("n", dtype="int64")
    expect_error([x, n], vg.broadcast_to(x, (n, 3)), [np.ones(2), np.int64(2)], ValueError,
                 "Alloc")
    expect_error([x, n], vg.broadcast_to(x, (n, 3)), [np.ones(3), np.int64(-1)], ValueError,
                 "Alloc")
    expect_error([x, n], vg.arange(0, n, n), [np.ones(3), np.int64(0)], ValueError, "ARange")
    y = vg.tensor("y", shape=(None, None), dtype="float64")
    expect_error([y], vg.concatenate([y, y.T], axis=0), [np.ones((2, 3))], ValueError, "Join")


@pytest.mark.parametrize("shape", [(0, 3), (3, 0), (1, 1)])
def test_empty_and_unit_shapes(shape):
    x = vg.tensor("x", shape=(None, None), dtype="float64")
    outs = [vg.reshape(x, (x.shape[1], x.shape[0])), vg.concatenate([x, x * 2.0]),
            vg.stack([x, x], 2),
            vg.broadcast_to(x, (2, x.shape[0], x.shape[1])), vg.cumsum(x),
            vg.arange(x.shape[0])]
    compare_backend([x], outs, [np.ones(shape)])


def test_a_reshape_to_lengths_needs_no_minus_one_handling():
    """A gradient's reshapes take products of lengths (never -1): their code only checks that
    the sizes agree (the transformer gradient's cold compile lost ~1 s to six of them, when
    the -1 resolution was written out)."""
    x = vg.tensor("x", shape=(None, None, None), dtype="float32")
    n = vg.tensor("n", shape=(), dtype="int64")
    flat = x.reshape((x.shape[0] * x.shape[1], x.shape[2]))
    outs = [flat * 2.0, x.reshape((n, x.shape[2])) + 1.0]
    fast, _ = compile_pair([x, n], outs)
    program = fast._runner.text
    # (only the reshape to `n`, any value, resolves a -1 and checks for more than one)
    assert program.count("= reshape_lengths") == 1
    for shape in [(2, 3, 4), (0, 3, 4), (2, 1, 0)]:
        xs = random_array(rng(13), "float32", shape)
        compare_backend([x, n], outs, [xs, np.int64(shape[0] * shape[1])])
    expect_error([x, n], outs, [random_array(rng(13), "float32", (2, 3, 4)), np.int64(5)],
                 ValueError, "Reshape")


@pytest.mark.parametrize("lengths, shape, message", [
    ((-1, -1), (2, 3, 4), "more than one -1"),
    ((-1, -2), (2, 3, 4), "more than one -1"),
    ((-1, 5), (2, 3, 4), r"new shape$"),
    ((5, 5), (2, 3, 4), "sizes differ"),
    ((-1, 0), (0, 3, 4), r"new shape$"),
    ((0, -1), (2, 0, 4), r"new shape$"),
])
def test_a_reshape_to_any_lengths_checks_as_numpy(lengths, shape, message):
    """Lengths only known at run time: numpy's -1 resolution and checks, in one intrinsic call
    (reshape_lengths), each error with its own message; numpy takes any negative length for
    the unknown one (the program once raised "negative dimension" for -2)."""
    x = vg.tensor("x", shape=(None, None, None), dtype="float32")
    n = vg.tensor("n", shape=(), dtype="int64")
    m = vg.tensor("m", shape=(), dtype="int64")
    outs = [x.reshape((n, m)) * 2.0]
    xs = random_array(rng(14), "float32", shape)
    expect_error([x, n, m], outs, [xs, np.int64(lengths[0]), np.int64(lengths[1])],
                 ValueError, "Reshape")
    fast, _ = compile_pair([x, n, m], outs)
    with pytest.raises(ValueError, match=message):
        fast(xs, np.int64(lengths[0]), np.int64(lengths[1]))
    for good in [(-1, 4), (6, -1), (24, 1), (-1, 24), (-2, 12), (2, -7)]:
        compare_backend([x, n, m], outs, [random_array(rng(15), "float32", (2, 3, 4)),
                                          np.int64(good[0]), np.int64(good[1])])
    compare_backend([x, n, m], outs, [random_array(rng(15), "float32", (0, 3, 4)),
                                      np.int64(-1), np.int64(4)])


@functools.cache
def matmul_program():
    a = vg.tensor("a", shape=(None, None), dtype="float64")
    b = vg.tensor("b", shape=(None, None), dtype="float32")
    v = vg.tensor("v", shape=(None,), dtype="float64")
    t3 = vg.tensor("t3", shape=(None, None, None), dtype="float64")
    t4 = vg.tensor("t4", shape=(None, 1, None, None), dtype="float32")
    outs = [a @ a.T, a @ v[: a.shape[1]], v[: a.shape[0]] @ a, vg.dot(v, v),
            a.astype("float32") @ b[: a.shape[1]], a @ b[: a.shape[1]], a.T[::-1] @ a,
            t3 @ t3.transpose(0, 2, 1), t3 @ a.T, a[: t3.shape[2]].T @ t3,
            t4 @ t3.astype("float32").transpose(0, 2, 1), vg.matmul(t3, v[: t3.shape[2]])]
    return [a, b, v, t3, t4], outs


@pytest.mark.parametrize("shapes", [
    dict(a=(3, 4), b=(5, 2), v=(6,), t3=(2, 3, 4), t4=(2, 1, 5, 4)),
    dict(a=(1, 1), b=(1, 1), v=(1,), t3=(1, 1, 1), t4=(1, 1, 1, 1)),
    dict(a=(3, 0), b=(0, 2), v=(3,), t3=(2, 0, 0), t4=(2, 1, 0, 0)),
])
def test_matmul(shapes):
    inputs, outs = matmul_program()
    g = rng(1)
    arrays = [random_array(g, i.dtype, shapes[i.name]) for i in inputs]
    compare_backend(inputs, outs, arrays)


@pytest.mark.parametrize("dtype", ["int32", "int64", "bool"])
def test_matmul_integer(dtype):
    a = vg.tensor("a", shape=(None, None), dtype=dtype)
    b = vg.tensor("b", shape=(None, None, None), dtype=dtype)
    outs = [a @ a.T, b @ a, a.astype("float64") @ a.T, vg.matmul(a, a[0])]
    compare_backend([a, b], outs, [random_array(rng(2), dtype, (3, 3)),
                                   random_array(rng(3), dtype, (2, 4, 3))])


def test_matmul_errors():
    a = vg.tensor("a", shape=(None, None), dtype="float64")
    b = vg.tensor("b", shape=(None, None, None), dtype="float64")
    expect_error([a, b], b @ a, [np.ones((3, 2)), np.ones((2, 2, 2))], ValueError, "MatMul")
    c = vg.tensor("c", shape=(None, None, None), dtype="float64")
    expect_error([b, c], b @ c, [np.ones((2, 2, 2)), np.ones((3, 2, 2))], ValueError, "MatMul")


@functools.cache
def strided_matmul_program(dtype):
    """Float products of operands of every memory layout gemm meets: C, F (transposes), rows
    strided (direct, ld > ncols), columns strided or reversed (copied), size-0/size-1 axes,
    k == 0, batched."""
    x = vg.tensor("x", shape=(None, None), dtype=dtype)  # (p, q)
    y = vg.tensor("y", shape=(None, None), dtype=dtype)  # (q, p)
    t = vg.tensor("t", shape=(None, None, None), dtype=dtype)  # (b, q, p)
    outs = [x @ y, y.T @ x.T, x @ x.T, y.T @ y,
            x[::-1] @ y, x @ y[:, ::-1], x[::-1, ::-1] @ y[::-1],
            x[:, ::2] @ y[::2], x[::2] @ y, x.T[::2] @ x, x[::2, 1:] @ y[1:, ::3],
            x[:, :1] @ y[:1], x[:, :1].T @ x, y[::-1, :1] @ x[:1, ::-1],
            x[:, :0] @ y[:0], x[:0] @ y, x @ y[:, :0],
            t @ t.transpose(0, 2, 1), t[:, ::-1] @ x, t[:, :, ::2] @ x[::2],
            x.T @ t.transpose(0, 2, 1), t.transpose(0, 2, 1)[:, ::2] @ y.T[:, ::-1].T,
            # (b, q, p) @ (p, q), `t` C-contiguous: one product over all b*q rows
            t @ x, t @ y.T, t @ x[:, ::-1], vg.expand_dims(t, 0) @ x,
            (x @ y.astype("float64" if dtype == "float32" else "float32"))]
    return [x, y, t], outs


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("p, q, b", [(4, 6, 3), (1, 1, 1), (3, 1, 2), (1, 5, 1), (0, 3, 2),
                                     (3, 0, 2), (2, 3, 0)])
def test_matmul_strided_operands(dtype, p, q, b):
    inputs, outs = strided_matmul_program(dtype)
    g = rng(7)
    arrays = [random_array(g, dtype, s) for s in ((p, q), (q, p), (b, q, p))]
    compare_backend(inputs, outs, arrays)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_matmul_unit_axes(dtype):
    """Length-1 axes made by DimShuffle (any stride is valid there) on strided vectors."""
    x = vg.tensor("x", shape=(None, None), dtype=dtype)
    outs = [vg.expand_dims(x[:, 0], 0) @ x, x @ vg.expand_dims(x[0], 1),
            vg.expand_dims(x[::-1, 1], 1) @ vg.expand_dims(x[0, ::2], 0),
            vg.expand_dims(x[:, 0], 0) @ vg.expand_dims(x[:, 1], 1)]
    for shape in [(3, 3), (1, 2), (4, 2)]:
        compare_backend([x], outs, [random_array(rng(9), dtype, shape)])


@functools.cache
def _gemm_caller():
    import numba

    from verglas.cpu_backend.array_kernels import _gemm

    @numba.njit
    def call(a, b, out):
        return _gemm(a, b, out)
    return call


def _layouts(x):
    """Views of `x`'s shape (its values but for the broadcast one) that gemm takes directly
    (True) or not (False)."""
    big = np.zeros((2 * x.shape[0] + 1, 3 * x.shape[1] + 1), x.dtype)
    yield True, x
    yield True, np.asfortranarray(x)
    rows = big[: 2 * x.shape[0] : 2, : x.shape[1]]
    rows[...] = x
    yield True, rows  # leading dimension > ncols
    fbig = np.zeros((2 * x.shape[0] + 1, x.shape[1] + 1), x.dtype, order="F")
    fcols = fbig[1: 1 + x.shape[0], : x.shape[1]]
    fcols[...] = x
    yield True, fcols  # column-major, leading dimension > nrows
    cols = big[: x.shape[0], ::3][:, : x.shape[1]]
    cols[...] = x
    yield cols.shape[1] <= 1 or cols.shape[0] <= 1, cols  # (one axis of length 1: fine)
    yield x.shape[0] <= 1, np.ascontiguousarray(x[::-1])[::-1]
    yield x.shape[1] <= 1, np.ascontiguousarray(x[:, ::-1])[:, ::-1]
    if x.shape[0] >= 1:  # every row the same: a zero row stride
        yield x.shape[0] <= 1, np.broadcast_to(x[:1], x.shape)
    # length-1 axes with odd strides (any stride is valid there)
    odd = np.lib.stride_tricks.as_strided(x, x.shape, (-7 * x.itemsize if x.shape[0] == 1
                                                       else x.strides[0],
                                                       5 * x.itemsize if x.shape[1] == 1
                                                       else x.strides[1]))
    if x.shape[0] == 1 or x.shape[1] == 1:
        yield True, odd


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("m, k, n", [(3, 4, 5), (1, 4, 5), (3, 1, 5), (3, 4, 1), (1, 1, 1),
                                     (0, 4, 5), (3, 0, 5), (3, 4, 0)])
def test_gemm_strides(dtype, m, k, n):
    """The gemm call's stride rules, on A-typed numba arrays: an operand it takes gives the
    numpy product, one it does not is reported (bit 0: a, bit 1: b) and nothing is written."""
    call = _gemm_caller()
    g = rng(8)
    a0, b0 = random_array(g, dtype, (m, k)), random_array(g, dtype, (k, n))
    rtol = 2e-5 if dtype == "float32" else 1e-12
    for ok_a, a in _layouts(a0):
        for ok_b, b in _layouts(b0):
            a_copy, b_copy = a.copy(), b.copy()
            out = np.full((m, n), np.nan, dtype)
            status = call(a, b, out)
            np.testing.assert_array_equal(a, a_copy)
            np.testing.assert_array_equal(b, b_copy)
            if m == 0 or n == 0 or k == 0:
                assert status == 0
                np.testing.assert_array_equal(out, np.zeros((m, n), dtype))
                continue
            assert status == (0 if ok_a else 1) | (0 if ok_b else 2), (a.strides, b.strides)
            if status:
                assert np.isnan(out).all()
            else:
                np.testing.assert_allclose(out, a_copy @ b_copy, rtol=rtol, atol=rtol * 10)


def test_a_matrix_times_a_vector_calls_gemv():
    """gemm with one column packs the whole matrix (4096x1024 float32 @ a vector: 0.58 ms,
    numpy's gemv 0.12): where one side is a vector the product calls numpy's gemv, the
    layouts and statuses of test_gemm_strides unchanged."""
    from verglas.cpu_backend.blas import numpy_cblas_gemv

    if not numpy_cblas_gemv():
        pytest.skip("numpy's BLAS is not a scipy-openblas wheel's")
    call = _gemm_caller()
    a, v = np.ones((5, 3), "float32"), np.ones((3, 1), "float32")
    call(a, v, np.empty((5, 1), "float32"))
    ir = "".join(call.inspect_llvm().values())
    assert "verglas_numpy_cblas_sgemv" in ir and "verglas_numpy_cblas_sgemm" in ir


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_matrix_times_its_transpose_calls_syrk(dtype):
    """x @ x.T and x.T @ x (one array seen both ways) call syrk, as numpy's matmul does: its
    result exactly (one triangle's products, the other mirrored: exactly symmetric), in C and
    F layouts and with a strided view; a reversed view goes to gemm through a copy."""
    from verglas.cpu_backend.blas import numpy_cblas_syrk

    if not numpy_cblas_syrk():
        pytest.skip("numpy's BLAS is not a scipy-openblas wheel's")
    x = vg.tensor("x", shape=(None, None), dtype=dtype)
    fast, _ = compile_pair([x], [x @ x.T, x.T @ x, x[::2] @ x[::2].T, x[:, ::-1] @ x[:, ::-1].T])
    g = rng(21)
    for shape in [(5, 3), (1, 4), (4, 1), (0, 3), (3, 0), (70, 40)]:
        xv = random_array(g, dtype, shape)
        for arr in (xv, np.asfortranarray(xv)):
            got = fast(arr)
            want = [xv @ xv.T, xv.T @ xv, xv[::2] @ xv[::2].T, xv[:, ::-1] @ xv[:, ::-1].T]
            for k in range(3):
                np.testing.assert_array_equal(got[k], want[k])
                np.testing.assert_array_equal(got[k], got[k].T)
            np.testing.assert_allclose(got[3], want[3], rtol=1e-5, atol=1e-5)
    call = _gemm_caller()
    a = np.ones((5, 3), dtype)
    call(a, a.T, np.empty((5, 5), dtype))
    ir = "".join(call.inspect_llvm().values())
    assert f"verglas_numpy_cblas_{ {'float32': 's', 'float64': 'd'}[dtype]}syrk" in ir


def test_softmax_family():
    x = vg.tensor("x", shape=(None, None), dtype="float32")
    outs = [vg.softmax(x), vg.log_softmax(x, axis=0), vg.logsumexp(x), vg.logsumexp(x, axis=1),
            vg.logsumexp(x, axis=0, keepdims=True)]
    compare_backend([x], outs, [random_array(rng(4), "float32", (5, 7))])
    special = np.array([[0.0, -np.inf, 1.0], [-np.inf, -np.inf, -np.inf], [np.inf, 1.0, 2.0]],
                       dtype="float32")
    compare_backend([x], outs, [special])


def test_mlp_forward_and_gradient():
    x = vg.tensor("x", shape=(None, 4), dtype="float64")
    y = vg.tensor("y", shape=(None,), dtype="int64")
    w1 = vg.tensor("w1", shape=(4, 8), dtype="float64")
    b1 = vg.tensor("b1", shape=(8,), dtype="float64")
    w2 = vg.tensor("w2", shape=(8, 3), dtype="float64")
    b2 = vg.tensor("b2", shape=(3,), dtype="float64")
    h = vg.tanh(x @ w1 + b1)
    logp = vg.log_softmax(h @ w2 + b2, axis=-1)
    loss = -vg.mean(logp[vg.arange(x.shape[0]), y])
    grads = vg.grad(loss, [w1, b1, w2, b2])
    g = rng(5)
    arrays = [g.normal(size=(6, 4)), g.integers(0, 3, size=6), g.normal(size=(4, 8)),
              g.normal(size=8), g.normal(size=(8, 3)), g.normal(size=3)]
    compare_backend([x, y, w1, b1, w2, b2], [loss, *grads], arrays)


_BLAS_SCRIPT = """
import numpy as np, verglas as vg
from verglas.cpu_backend.blas import numpy_cblas_gemm, numpy_cblas_gemv
a = vg.tensor("a", shape=(None, None), dtype="float32")
b = vg.tensor("b", shape=(None, None), dtype="float64")
f = vg.compile([a, b], [a @ a.T, b.T @ b])
g = np.random.default_rng(0)
x, y = g.standard_normal((5, 3)).astype("float32"), g.standard_normal((4, 6))[:, ::2]
r = f(x, y)
assert np.allclose(r[0], x @ x.T, rtol=1e-5) and np.allclose(r[1], y.T @ y)
print(sorted(numpy_cblas_gemv()))
print(sorted(numpy_cblas_gemm()))
"""


@pytest.mark.parametrize("numpy_blas", ["1", "0"])
def test_products_through_numpy_blas_or_numbas(tmp_path, numpy_blas):
    """numpy's own CBLAS where its wheel ships one (one thread pool with numpy's products),
    numba's gemm otherwise (VERGLAS_NUMPY_BLAS=0 forces it): the same results."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, VERGLAS_CACHE_DIR=str(tmp_path), VERGLAS_NUMPY_BLAS=numpy_blas)
    out = subprocess.run([sys.executable, "-c", _BLAS_SCRIPT], env=env, text=True,
                         capture_output=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    import glob

    libs = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs")
    wheel = bool(glob.glob(os.path.join(libs, "libscipy_openblas64_*")))
    expected = "['d', 's']" if numpy_blas == "1" and wheel else "[]"
    assert out.stdout.strip().splitlines()[-2:] == [expected, expected]


def test_a_program_stored_with_one_blas_is_not_loaded_with_the_other(tmp_path):
    """Whose gemm products call is part of a stored program's key: its machine code names
    numpy's CBLAS symbols, which VERGLAS_NUMPY_BLAS=0 leaves unregistered (loading it then
    crashed the process)."""
    import os
    import subprocess
    import sys

    for numpy_blas in ("1", "0", "1"):
        env = dict(os.environ, VERGLAS_CACHE_DIR=str(tmp_path), VERGLAS_NUMPY_BLAS=numpy_blas)
        out = subprocess.run([sys.executable, "-c", _BLAS_SCRIPT], env=env, text=True,
                             capture_output=True, timeout=300)
        assert out.returncode == 0, (numpy_blas, out.returncode, out.stderr[-2000:])


def test_a_large_program_runs_its_elementwise_loops_in_kernel_functions():
    """Past LARGE_FUNCTION_STEPS steps over arrays, every elementwise loop runs in a kernel
    function of its own: LLVM no longer inlines the vector math kernels into a large program
    function (a scalar call per element), and kernels compile in a second process while the
    program does (aside.py)."""
    from verglas.cpu_backend.codegen import LARGE_FUNCTION_STEPS

    x = vg.tensor("x", shape=(None, None), dtype="float32")
    w = vg.tensor("w", shape=(None, None), dtype="float32")
    h = x
    for k in range(LARGE_FUNCTION_STEPS // 2 + 1):  # a product breaks every fusion
        h = (h @ w) * np.float32(0.5 + k / 100)
    out = vg.tanh(h @ w) * 2
    fast, _ = compile_pair([x, w], [out])
    text = fast.source()
    body = text[text.index("\ndef program("):text.index("\n# -- what verglas")]
    code = [line for line in body.splitlines() if not line.strip().startswith("#")]
    kernels = text[:text.index("\ndef program(")]
    assert not any("tanh" in line or re.match(r"\s*for i\d+ in", line) for line in code)
    assert "tanh" in kernels  # (the loop over the repeated steps, `for rp0`, stays)
    g = rng(11)
    compare_backend([x, w], [out], [g.normal(size=(5, 4)).astype("float32"),
                                    (g.normal(size=(4, 4)) * 0.5).astype("float32")])


def test_a_batched_transpose_goes_to_gemm_as_it_is():
    """Attention's q @ k^T: each matrix of k.transpose(0, 2, 1) is the transpose of one of k's
    own (F-contiguous), handed to gemm as it is: no fallback copy, whose code cost ~0.3 s of
    compile time (one _gemm_batch lowered in place, its second operand transposed)."""
    q = vg.tensor("q", shape=(None, None, None), dtype="float32")
    k = vg.tensor("k", shape=(None, None, None), dtype="float32")
    out = q @ k.transpose(0, 2, 1)
    fast, _ = compile_pair([q, k], [out])
    text = fast._runner.text
    assert "ascontiguousarray" not in text and ", False, True)" in text and "bgemm" not in text
    g = rng(11)
    for qs, ks in [((2, 3, 4), (2, 5, 4)), ((1, 3, 4), (2, 5, 4)), ((2, 3, 4), (1, 5, 4)),
                   ((2, 0, 4), (2, 5, 4)), ((2, 3, 0), (2, 5, 0))]:
        compare_backend([q, k], [out], [random_array(g, "float32", qs),
                                        random_array(g, "float32", ks)])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_vector_times_a_transposed_matrix_is_dot_products(dtype):
    """v @ w.T (a backward loop's product) runs as dot products of v with w's rows (_row_dots:
    gemm packed the transposed operand at every call), four rows at a time and the rest one
    by one; above ROW_DOTS_MAX elements it is gemm's."""
    from verglas.cpu_backend.array_kernels import ROW_DOTS_MAX

    v = vg.tensor("v", shape=(None,), dtype=dtype)
    w = vg.tensor("w", shape=(None, None), dtype=dtype)
    outs = [v @ w.T, vg.expand_dims(v, 0) @ w.T, v[::-1] @ w.T]
    fast, _ = compile_pair([v, w], outs)
    assert "row_dots0(" in fast.source()
    g = rng(12)
    side = int(np.sqrt(ROW_DOTS_MAX)) + 1
    for k, n in [(0, 3), (3, 0), (1, 1), (5, 7), (8, 64), (side, side)]:
        # (float32 sums of 257 products, in another order than numpy's)
        compare_backend([v, w], outs, [random_array(g, dtype, (n,)),
                                       random_array(g, dtype, (k, n))],
                        rtol=1e-4 if dtype == "float32" else None)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_vector_times_a_matrix_keeps_its_sums_in_registers(dtype):
    """v @ w (a recurrent step's h @ W) runs as _row_times: w's columns in blocks of 8, then 4
    vectors whose sums stay in registers over w's rows, then one vector, then one column at a
    time (every stage below: 1, 7, 16, 64, 200 and 203 columns); above ROW_DOTS_MAX elements
    it is gemm's."""
    from verglas.cpu_backend.array_kernels import ROW_DOTS_MAX

    v = vg.tensor("v", shape=(None,), dtype=dtype)
    w = vg.tensor("w", shape=(None, None), dtype=dtype)
    outs = [v @ w, vg.expand_dims(v, 0) @ w, v[::-1] @ w]
    fast, _ = compile_pair([v, w], outs)
    assert "row_times0(" in fast.source()
    g = rng(13)
    side = int(np.sqrt(ROW_DOTS_MAX)) + 1
    for k, n in [(0, 3), (3, 0), (1, 1), (5, 7), (8, 16), (64, 64), (3, 200), (2, 203),
                 (side, side)]:
        # (sums of up to 257 products in another order than numpy's: near-cancelling ones
        # differ by a few of the terms' ulps)
        compare_backend([v, w], outs, [random_array(g, dtype, (k,)),
                                       random_array(g, dtype, (k, n))],
                        rtol=1e-4 if dtype == "float32" else None,
                        atol=1e-4 if dtype == "float32" else 1e-12)
