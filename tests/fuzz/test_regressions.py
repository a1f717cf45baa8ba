"""Regression tests: each program a random program the fuzzer found failing, minimized.

Each case compiles for the CPU (fast_run and, for the cheap ones, the reference executor) and
compares with numpy bit for bit where numpy's answer is exact: dtype, shape, values, NaN
positions and signed zeros.
"""

from __future__ import annotations

import numpy as np
import pytest

import verglas as vg

F16, F32, F64 = "float16", "float32", "float64"


def same(got, want, rtol=0.0):
    """`got` is numpy's `want`: dtype, shape, values (within `rtol`), NaNs, signed zeros."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, f"dtype {got.dtype}, numpy {want.dtype}"
    assert got.shape == want.shape, f"shape {got.shape}, numpy {want.shape}"
    if want.dtype.kind in "fc":
        for part in ("real", "imag") if want.dtype.kind == "c" else ("real",):
            g, w = getattr(got, part), getattr(want, part)
            np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
            ok = ~np.isnan(w)
            np.testing.assert_allclose(g[ok], w[ok], rtol=rtol, atol=0)
            zero = ok & (w == 0)
            np.testing.assert_array_equal(np.signbit(g[zero]), np.signbit(w[zero]),
                                          err_msg="signed zeros")
    else:
        np.testing.assert_array_equal(got, want)


def run(inputs, outputs, values, mode="fast_run"):
    f = vg.compile(inputs, outputs, mode=mode)
    return f(*values)


def t(name, shape, dtype):
    return vg.tensor(name, shape=shape, dtype=dtype)


# -- elementwise semantics ------------------------------------------------------------------------
def test_floor_ceil_keep_infinities_signs_and_integers():
    """floor/ceil went through an int: inf became -9.2e18 (after a cumsum and a where, as the
    issue saw), ceil(-0.89) lost its sign, and a large int64 its low bits."""
    x, i = t("x", (None,), F64), t("i", (None,), "int64")
    xs = np.array([-np.inf, np.inf, np.nan, -0.89, -0.0, 2.5, 1e300])
    cs = np.cumsum(np.array([1.0, -np.inf, 2.0]))
    ints = np.array([-1125491400382809476, 7], np.int64)
    got = run([x, i], [vg.floor(x), vg.ceil(x), vg.where(vg.floor(vg.cumsum(x)) < 0,
                                                           vg.ceil(vg.cumsum(x)), 0.0),
                       vg.floor(i), vg.ceil(i)], [xs, ints])
    same(got[0], np.floor(xs))
    same(got[1], np.ceil(xs))
    c = np.cumsum(xs)
    same(got[2], np.where(np.floor(c) < 0, np.ceil(c), 0.0))
    same(got[3], ints)
    same(got[4], ints)
    same(run([x], vg.ceil(vg.cumsum(x)), [np.array([1.0, -np.inf, 2.0])]), np.ceil(cs))


def test_float32_cos_is_one_where_it_rounds_to_one():
    """float32 cos(0) was 1 - 2^-24 (seed 28921: cos(-0.0) subtracted from tan(0.5) in
    float64): the vector cos computes sin(x - pi/2), whose polynomial sums r ~ -1.57 and a
    term ~ 0.57 in float32. cos(x) rounds to 1 for |x| <= 2^-12."""
    x = t("x", (None,), F32)
    xs = np.array([0.0, -0.0, 1e-30, 1e-8, 1e-4, 2.0**-12, -(2.0**-12), 2.4415e-4, 3e-4],
                  F32)
    xs = np.tile(xs, 5)  # (vector lanes and the loop's remainder)
    got = run([x], [vg.cos(x)], [xs])[0]
    same(got, np.cos(xs))


def test_maximum_minimum_ties_and_nan_as_numpy():
    x, i = t("x", (None,), F32), t("i", (None,), "int64")
    xs = np.array([-0.0, 0.0, np.nan, 1.0], np.float32)
    got = run([x], [vg.maximum(x, 0), vg.minimum(x, -0.0), vg.maximum(0.0, x)], [xs])
    same(got[0], np.maximum(xs, np.float32(0)))
    same(got[1], np.minimum(xs, np.float32(-0.0)))
    same(got[2], np.maximum(np.float32(0.0), xs))
    z = t("z", (), F64)
    ints = np.array([147, 0])
    same(run([i, z], vg.maximum(i, z), [ints, np.array(-0.0)]), np.maximum(ints, -0.0))


def test_clip_is_numpys_three_way_clip():
    x = t("x", (None,), F64)
    xs = np.array([-1.0, 0.0, -0.0, 2.0, np.nan])
    same(run([x], vg.clip(x, -0.0, 0.0), [xs]), np.clip(xs, -0.0, 0.0))
    u = t("u", (None,), "uint8")
    us = np.array([0, 5, 255], np.uint8)
    same(run([u], vg.clip(u, -5, 300), [us]), np.clip(us, -5, 300))
    i = t("i", (None,), "int32")
    same(run([i], vg.clip(i, 2**31, 0.0), [np.array([2], np.int32)]),
         np.clip(np.array([2], np.int32), 2**31, 0.0))
    b = t("b", (None,), "bool")
    bound = np.array(1e-38, np.float32)
    same(run([b], vg.clip(b, 255, bound), [np.array([True])]),
         np.clip(np.array([True]), 255, bound))
    with pytest.raises(OverflowError):
        vg.clip(u, 300, 400)


def test_signed_zeros_without_nsz_and_quotients_without_arcp():
    """0.0 - x became -x (nsz: -0.0 for x = 0), x // x of the smallest subnormal became inf
    (arcp: x * (1 / x) with 1 / x overflowing), (0+0j) * -28.0 got a -0.0 imaginary part."""
    s16 = t("s", (None,), "int16")
    xs = np.array([-32767, -1, 1, 0], np.int16)
    same(run([s16], vg.max(vg.reshape(vg.full((1,), 0.0, F32) - s16, (4, 1)), axis=1), [xs]),
         np.max((np.float32(0.0) - xs).reshape(4, 1), axis=1))
    x = t("x", (None,), F32)
    tiny = np.array([1.401298464324817e-45, 3.0, np.inf], np.float32)
    same(run([x], vg.floor_divide(x, x), [tiny]), np.floor_divide(tiny, tiny))
    c = t("c", (None,), F32)
    cs = np.array([-28.0, 3.0], np.float32)
    same(run([c], vg.zeros((2,), "complex64") * c, [cs]), np.zeros(2, np.complex64) * cs)


def test_numpys_loop_dtypes():
    """float32 ** int32 is computed in float64 as numpy does (it was float32); int64 against
    float64 compares in float64."""
    x, e = t("x", (), F32), t("e", (3,), "int32")
    xs, es = np.array(-7.0, np.float32), np.array([1, -2, -3], np.int32)
    same(run([x, e], x ** e, [xs, es]), xs ** es)
    i, f = t("i", (None,), "int64"), t("f", (None,), F64)
    big = np.array([2**53 + 1, 3], np.int64)
    fl = np.array([2.0**53, 3.0])
    same(run([i, f], [i < f, vg.eq(i, f)], [big, fl])[1], np.equal(big, fl))


def test_vectorized_math_takes_integer_arguments():
    """erf(int64) called the float64 kernel with an int64 (LLVM: bitcast i64 to i32)."""
    i = t("i", (None, None, None), "int64")
    vals = np.array([[[-2, 0, 3]]], np.int64)
    import scipy.special

    same(run([i], vg.erf(i), [vals]), scipy.special.erf(vals.astype(F64)), rtol=1e-15)
    same(run([i], vg.sin(i), [vals]), np.sin(vals), rtol=1e-15)


def test_shared_kernels_are_typed_by_their_inputs():
    """One clip op used twice, with a float64 and a uint16 bound: the shared kernel's scalar
    groups were typed by the first use (the second stored 0.126 into a uint16)."""
    x = t("x", (1,), F64)
    v1 = x.T
    v4 = vg.where(v1, x, v1)
    v5 = vg.clip(v1, np.array([59836], dtype="uint16"), x[None])
    v7 = vg.clip(v4, 2147483648, -5)
    xs = np.array([0.1262677088493031])
    got = run([x], [v7, v5], [xs])
    same(got[0], np.clip(np.where(xs, xs, xs), 2147483648, -5))
    same(got[1], np.clip(xs, np.array([59836], np.uint16), xs[None]))


def test_row_group_reads_its_own_one_element_results_in_the_loop():
    """A (1, 1) sum inside a fused row loop was read before the loop computed it (a stale
    workspace value: two calls disagreed)."""
    x = t("x", (), F32)
    v = vg.reshape(x, (1, 1))
    for mode in ("fast_run", "fast_compile"):
        f = vg.compile([x], [vg.std(v, axis=-1), vg.var(v * 3, axis=1)], mode=mode)
        for value in (-2.0, 5.0, -0.0):
            for got in f(np.array(value, np.float32)):
                same(got, np.zeros(1, np.float32))


# -- dtypes --------------------------------------------------------------------------------------
def test_float16_programs_run_on_the_cpu():
    """numba has no float16: such programs did not compile (exp of an int8 is float16)."""
    x, y = t("x", (None,), F16), t("y", (None,), "int8")
    xs = np.array([1.5, 2.001, 65000, -3, np.nan, -0.0], np.float16)
    ys = np.array([1, 2, 3, 4, -5, 0], np.int8)
    got = run([x, y], [x * 3 + y, vg.exp(y), vg.cumsum(x), x.astype(F32) / 3,
                       vg.cast(y.astype(F64) / 7, F16), vg.max(x), x @ x], [xs, ys])
    same(got[0], xs * np.float16(3) + ys)
    same(got[1], np.exp(ys), rtol=1e-3)
    same(got[2], np.cumsum(xs))
    same(got[3], xs.astype(F32) / np.float32(3))
    same(got[4], (ys.astype(F64) / 7).astype(F16))
    same(got[5], np.max(xs))
    assert got[6].dtype == np.float16


def test_complex_programs():
    z, w = t("z", (None,), "complex128"), t("w", (None,), "complex64")
    zs = np.array([0j, 3 + 4j, complex(np.inf, 1), complex(1, -2)])
    ws = np.array([1 + 1j, 1 - 1j, 2 + 0j, 0j], np.complex64)
    got = run([z, w], [vg.exp(w), w.astype(F32), z / vg.zeros((4,), "int32"), vg.ge(w, w[::-1]),
                       vg.maximum(z, 0.5), vg.min(z), vg.argmax(z), vg.sign(z),
                       vg.std(z), vg.imag(w), vg.real(z)], [zs, ws])
    with np.errstate(all="ignore"):
        same(got[0], np.exp(ws), rtol=1e-6)
        same(got[1], ws.real)
        same(got[2], zs / np.zeros(4, np.int32))
        same(got[3], ws >= ws[::-1])
        same(got[4], np.maximum(zs, 0.5))
        same(got[5], np.min(zs))
        same(got[6], np.argmax(zs))
        same(got[7], np.sign(zs))
        same(got[8], np.std(zs))
    same(got[9], np.imag(ws))
    same(got[10], np.real(zs))
    b = t("b", (None,), "bool")
    same(run([b], [vg.imag(b)], [np.array([True])])[0], np.imag(np.array([True])))
    with pytest.raises(TypeError, match="complex"):
        vg.sigmoid(z)


def test_weak_scalars_are_typed_by_array_operands():
    """where(c, 256, a float32 array) was float64: the array did not count as an operand."""
    c = t("c", (), "complex64")
    value = np.array(78.6, np.float32)
    assert vg.where(c, 256, value).dtype == "float32"
    b = t("b", (), "bool")
    # two Python ints are typed as numpy types them apart (uint64, int64: float64); numpy's
    # np.where itself wraps 2**63 into int64 here
    assert vg.where(b, 2**63, -5).dtype == "float64"
    assert vg.where(2**63, 1.0, 2.0).dtype == "float64"  # only the condition's truth matters
    assert vg.full((), 2**63).dtype == "uint64"


# -- shapes, indexing, updates -------------------------------------------------------------------
def test_dot_with_an_empty_contracted_axis():
    a = t("a", (None, None, None), "bool")
    aval, b = np.zeros((1, 1, 0), bool), np.zeros((2, 0, 4), bool)
    same(run([a], vg.dot(a, b), [aval]), np.dot(aval, b))


def test_squeeze_without_axes_needs_a_static_shape():
    x = t("x", (None, 1), F64)
    with pytest.raises(ValueError, match="squeeze"):
        vg.squeeze(x)
    y = t("y", (3, 1), F64)
    same(run([y], vg.squeeze(y), [np.ones((3, 1))]), np.ones(3))


def test_softmax_family_over_an_empty_axis():
    x = t("x", (None, None), F32)
    empty = np.zeros((3, 0), np.float32)
    got = run([x], [vg.logsumexp(x, axis=1), vg.softmax(x, axis=1), vg.log_softmax(x, axis=1)],
              [empty])
    same(got[0], np.full(3, -np.inf, np.float32))
    assert got[1].shape == got[2].shape == (3, 0)


def test_integer_softmax_after_a_reduction_and_a_cast():
    i = t("i", (None, None), "int32")
    vals = np.array([[3, 1000, -7], [5, 5, 5]], np.int32)
    s = vg.cast(vg.sum(i, axis=0), F32)
    got = run([i], [vg.logsumexp(s), vg.softmax(vg.sum(i, axis=1)), vg.log_softmax(i, axis=0)],
              [vals])
    sv = np.sum(vals, axis=0).astype(np.float32)
    same(got[0], np.float32(np.max(sv) + np.log(np.sum(np.exp(sv - np.max(sv))))), rtol=1e-6)
    r = np.sum(vals, axis=1).astype(F64)
    same(got[1], np.exp(r - r.max()) / np.sum(np.exp(r - r.max())), rtol=1e-12)
    v = vals.astype(F64)
    same(got[2], v - v.max(axis=0) - np.log(np.sum(np.exp(v - v.max(axis=0)), axis=0)),
         rtol=1e-12)


def test_set_subtensor_converts_as_numpys_setitem():
    x = t("x", (None,), "bool")
    same(run([x], vg.set_subtensor(x[...], 2**63), [np.array([False, False])]),
         np.array([True, True]))
    u = t("u", (None,), "uint8")
    with pytest.raises(OverflowError):
        vg.set_subtensor(u[np.array([0, 0])], -5)
    y = t("y", (None,), "uint32")
    w = t("w", (1, None), "uint32")
    yv, wv = np.zeros(3, np.uint32), np.array([[3, 4, 5]], np.uint32)
    want = yv.copy()
    want[:] = wv
    same(run([y, w], vg.set_subtensor(y[:], w), [yv, wv]), want)
    m = t("m", (2,), F32)
    with pytest.raises(ValueError):
        vg.set_subtensor(m[-1], vg.ones((1,), F32))  # numpy: a sequence into one element


def test_shifts_as_numpy():
    a, b = t("a", (None,), "int8"), t("b", (None,), "int8")
    av = np.array([1, 5, -3, 1, -3], np.int8)
    bv = np.array([7, 8, 1, -1, 20], np.int8)
    got = run([a, b], [a << b, a >> b, vg.left_shift(a, 3), vg.right_shift(b, a)], [av, bv])
    same(got[0], np.left_shift(av, bv))
    same(got[1], np.right_shift(av, bv))
    same(got[2], np.left_shift(av, 3))
    same(got[3], np.right_shift(bv, av))


def test_division_by_a_constant_stays_exact():
    x = t("x", (None,), F64)
    xs = np.array([6.0, 9.0, 49.0, 1.0])
    same(run([x], [vg.floor(x / 3.0), vg.floor(x / 7.0)], [xs])[1], np.floor(xs / 7.0))


def test_signed_integers_wrap_around():
    """numba marks signed +, -, * no-signed-wrap: LLVM folded x + INT64_MIN into x | INT64_MIN
    (x for negative x). INT64_MIN // -1 gave 0."""
    x, y = t("x", (None,), "int64"), t("y", (None,), "int64")
    a = np.array([-2, -2**63, 2**62, -2**63, 7], np.int64)
    b = np.array([-2**63, -1, 4, 1, 0], np.int64)
    got = run([x, y], [x + y, x - y, x * y, -x, x // y, x % y, vg.sum(x), vg.cumsum(y),
                       vg.inc_subtensor(x[np.array([0, 1, 0])], np.array(-2**63))], [a, b])
    want = a.copy()
    np.add.at(want, np.array([0, 1, 0]), np.int64(-2**63))
    with np.errstate(all="ignore"):
        for g, w in zip(got, [a + b, a - b, a * b, -a, a // b, a % b, np.sum(a), np.cumsum(b),
                              want]):
            same(g, w)


def test_shared_kernels_are_keyed_by_rank():
    """One op on a (1, 1) and a (1,) output (fast_compile) shared a kernel written for one
    rank."""
    x = t("x", (None,), "int64")
    m = vg.reshape(x, (1, 1))
    outs = [vg.exp(m * 2.0), vg.exp(vg.reshape(x, (1,)) * 2.0)]
    xs = np.array([3], np.int64)
    for mode in ("fast_run", "fast_compile"):
        got = run([x], outs, [xs], mode)
        same(got[0], np.exp(xs.reshape(1, 1) * 2.0), rtol=1e-15)
        same(got[1], np.exp(xs * 2.0), rtol=1e-15)


def test_a_cast_through_float64_rounds_large_integers():
    """cast(cast(x, float64), int64) was folded into x: numpy's 'safe' int64 -> float64 is
    not exact above 2**53."""
    x = t("x", (None,), "int64")
    xs = np.array([-7067356314067703396, 3], np.int64)
    same(run([x], x.astype(F64).astype("int64"), [xs]), xs.astype(F64).astype(np.int64))


def test_cumsum_keeps_the_first_elements_sign():
    x = t("x", (None, None), F64)
    xs = np.array([[-0.0, -0.0], [1.0, -0.0]])
    got = run([x], [vg.cumsum(x), vg.cumsum(x, axis=0), vg.cumsum(x, axis=1)], [xs])
    same(got[0], np.cumsum(xs))
    same(got[1], np.cumsum(xs, axis=0))
    same(got[2], np.cumsum(xs, axis=1))


def test_maximum_with_a_uniform_constant_keeps_negative_zero():
    """maximum(full(0.0), x) read the constant as a frozen array: LLVM turned the vectorized
    select into x <= 0 ? 0 : x, losing -0.0 (now a one-value constant is a literal)."""
    x = t("x", (None, None), F16)
    xs = np.array([[0.0], [-0.0], [10000.0]], np.float16)
    same(run([x], vg.maximum(vg.full((5,), 0.0), x), [xs]), np.maximum(np.full(5, 0.0), xs))


def test_integer_power_as_numpy():
    """x ** y of integers: repeated squaring that wraps around, and an error for a negative
    exponent (it returned garbage)."""
    x, y = t("x", (None,), "int32"), t("y", (None,), "int32")
    a, b = np.array([3, -2, 7, 0, 2], np.int32), np.array([7, 3, 20, 0, 31], np.int32)
    f = vg.compile([x, y], x ** y)
    same(f(a, b), a ** b)
    with pytest.raises(ValueError, match="negative"):
        f(a, -b)


def test_elementwise_over_one_element_inputs_only():
    """Every input of a fused op one element (a reshaped 0-d input and constants): no array
    input gave the output's length (fast_compile: StopIteration while generating code)."""
    x, u = t("x", (), F64), t("u", (), "uint32")
    v = vg.reshape(x, (-1,))
    out = vg.ceil(vg.maximum(3, vg.where(v, -1, 3.4e38)))
    xs, us = np.array(0.0), np.array(1428648192, np.uint32)
    for mode in ("fast_run", "fast_compile"):
        same(run([x, u], out, [xs, us], mode),
             np.ceil(np.maximum(3, np.where(xs.reshape(-1), -1, 3.4e38))))


def test_integer_division_and_modulo_by_zero_give_zero():
    x, y = t("x", (None,), "int32"), t("y", (None,), "int32")
    a, b = np.array([7, -7, 0, -2**31], np.int32), np.array([0, 0, 0, -1], np.int32)
    with np.errstate(all="ignore"):
        same(run([x, y], x // y, [a, b]), a // b)
        same(run([x, y], x % y, [a, b]), a % b)


def test_binary_logical_ops_refuse_python_ints_beyond_int64():
    """numpy's logical_and/logical_or take a Python int as a C long, whatever the array: one
    beyond int64 is an OverflowError there (verglas returned True)."""
    b = t("b", (None,), "bool")
    for op in (vg.logical_and, vg.logical_or):
        for value in (2**63, -2**63 - 1):
            with pytest.raises(OverflowError, match=op.__name__):
                op(b, value)
        assert op(b, 2**63 - 1).dtype == "bool"
    xs = np.array([True, False])
    same(run([b], vg.logical_and(b, -2**63), [xs]), np.logical_and(xs, -2**63))


def test_inc_subtensor_with_a_2d_index_and_broadcast_values():
    """Repeated increments through a 2-d index with values broadcast along it. verglas was
    right; the oracle's np.add.at (numpy 2.4) read past the unbroadcast values and gave nan
    or missed terms, so the oracle now broadcasts them itself."""
    x = t("x", (None,), F64)
    idx, vals = np.array([[-1, 0], [-1, -1]]), np.array([-2.0, 3.0])
    xs = np.array([-0.5])
    want = xs.copy()
    for k, j in np.ndindex(idx.shape):
        want[idx[k, j]] += vals[j]
    for mode in ("reference", "fast_run"):
        same(run([x], vg.inc_subtensor(x[idx,], vals), [xs], mode), want)


def test_dimshuffle_dropping_every_axis_of_a_strided_view():
    """A DimShuffle dropping the one axis of a strided length-1 slice indexed it down to the
    element itself, and the next step read that scalar as a 0-d array (numba TypingError,
    fuzzer seed 413)."""
    x = t("x", (None,), F32)
    v = x[::-2]  # length 1 for a length-1 x: a strided view
    out = vg.any(v, axis=0)
    xs = np.array([-2.0], np.float32)
    for mode in ("reference", "fast_run"):
        same(run([x], [out, v.sum(axis=0) * 2], [xs], mode)[0], np.any(xs[::-2], axis=0))
        same(run([x], [out, v.sum(axis=0) * 2], [xs], mode)[1], xs[::-2].sum(axis=0) * 2)


def test_inc_subtensor_refuses_a_sum_that_cannot_go_back():
    """x[idx] += v adds in numpy's result dtype: int32 + uint64 adds in float64, which numpy
    cannot cast back into int32 (TypeError); verglas added (fuzzer seed 3271)."""
    x, v = t("x", (None,), "int32"), t("v", (1,), "uint64")
    with pytest.raises(TypeError, match="cannot add"):
        vg.inc_subtensor(x[np.array([0, -1])], v)
    ones = np.ones(2, np.int32)
    with pytest.raises(TypeError):
        ones[[0]] += np.array([1], np.uint64)
    y = t("y", (None,), "int64")  # int64 + uint8 stays int64: allowed
    same(run([y], vg.inc_subtensor(y[np.array([0, 0])], np.uint8(3)), [np.arange(2)]),
         np.array([6, 1]))


def test_vectorized_math_of_a_nan_llvm_can_see():
    """clip(x, nan, x) of an integer x is a NaN LLVM knows when it compiles the loop: folding
    exp(nan) went through numba's float-to-int conversion of NaN, which is poison to LLVM,
    and the result was whatever the output's memory held, another value at each call
    (fuzzer seed 2727: erf(sigmoid(...))). The kernels convert through the bits now."""
    names = ("exp", "expm1", "log", "log1p", "sin", "cos", "tan", "tanh", "sigmoid",
             "softplus", "erf")
    for dtype, float_dtype in (("uint64", F64), ("int16", F32)):
        x = t("x", (None,), dtype)
        nan = vg.clip(x, np.array(np.nan, float_dtype), x)
        for name in names + ("erf_sigmoid",):
            out = vg.erf(vg.sigmoid(nan)) if name == "erf_sigmoid" else getattr(vg, name)(nan)
            f = vg.compile([x], out)
            for _ in range(2):
                got = f(np.array([1, 2, 3], dtype))
                assert got.dtype == float_dtype and np.isnan(got).all(), (name, dtype, got)


def test_float_to_int_casts_are_defined_for_nan_and_out_of_range():
    """clip(x, 256, nan) is a NaN LLVM could see; its cast to int8 was poison and came out
    another value at each call (fuzzer seed 2974). Casts of floats to integers now go
    through a saturating int64 (uint64) conversion: in-range values truncate as numpy's,
    NaN gives 0, the rest are defined (numpy leaves them unspecified)."""
    x = t("x", (None,), "uint64")
    nan = vg.clip(x.astype(F64), 256, np.array(np.nan))
    f = vg.compile([x], [nan.astype(d) for d in ("int8", "int64", "uint64")])
    first = f(np.array([1, 2], np.uint64))
    for _ in range(3):
        for a, b in zip(first, f(np.array([1, 2], np.uint64))):
            np.testing.assert_array_equal(a, b)
    assert all((r == 0).all() for r in first)
    y = t("y", (None,), F64)
    values = np.array([-17.4, 119.9, -0.0, 255.7, -1.0, 2.5e9, -3e9, 1.5e19])
    dtypes = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")
    got = vg.compile([y], [y.astype(d) for d in dtypes])(values)
    for d, g in zip(dtypes, got):
        info = np.iinfo(d)
        ok = (values > info.min - 1) & (values < info.max + 1)
        same(g[ok], values[ok].astype(d))
    same(got[1][:1], values[:1].astype(np.int64).astype(np.uint8))  # -17.4 -> 239, as numpy


def test_complex_log_is_accurate_near_the_unit_circle():
    """log(z) for |z| = 1 + 6.5e-6 lost its low digits through log(hypot(...)): 4e-12
    relative off numpy (fuzzer seed 3815). log1p of a*a + b*b - 1 summed exactly now."""
    x = t("x", (None,), "complex128")
    rng = np.random.default_rng(0)
    near = np.exp(1j * rng.uniform(0, 6, 500)) * (1 + rng.normal(size=500) * 1e-9)
    z = np.concatenate([1 + rng.normal(size=500) * 1e-5 + 1j * rng.normal(size=500) * 1e-4,
                        near, rng.normal(size=500) + 1j * rng.normal(size=500),
                        [0, -0.0, np.inf, -np.inf, complex(-0.0, -0.0), 1, -1, 2.5e-320]])
    got, want = run([x], vg.log(x), [z]), np.log(z)
    finite = np.isfinite(want)
    np.testing.assert_array_equal(got[~finite], want[~finite])
    np.testing.assert_allclose(got.real[finite], want.real[finite], rtol=1e-15, atol=0)
    np.testing.assert_allclose(got.imag[finite], want.imag[finite], rtol=1e-15, atol=0)


def test_sign_of_negative_zero_is_positive_zero():
    """numpy's sign(-0.0) is 0.0; the compiled sign returned its argument for zeros and NaN,
    so -0.0 (fuzzer seed 4915: sign(-x) of x = 0.0)."""
    for dtype in (F16, F32, F64):
        x = t("x", (None,), dtype)
        xs = np.array([0.0, -0.0, np.nan, 3.0, -2.0, np.inf, -np.inf], dtype)
        for mode in ("reference", "fast_run"):
            got = run([x], [vg.sign(x), vg.sign(-x)], [xs], mode)
            same(got[0], np.sign(xs))
            same(got[1], np.sign(-xs))


def test_complex_exp_is_c99s_cexp():
    """exp(z) of a complex with a zero imaginary part and a large real part gave inf + nan*j
    where numpy gives inf + 0j (fuzzer seed 4658: exp of int32 extremes stacked into
    complex128); exp(710 + 1j) has a finite real part, computed in two halves whose product
    'reassoc' would fold back into exp(710)."""
    inf, nan = np.inf, np.nan
    zs = np.array([complex(1000, 0), complex(1000, -0.0), complex(-inf, inf), complex(-inf, nan),
                   complex(inf, inf), complex(inf, nan), complex(inf, 0), complex(nan, 0),
                   complex(nan, 1), complex(1, inf), complex(-inf, 1), complex(inf, 1),
                   complex(800, 1e-300), complex(710, 1), complex(-5, 2), complex(0.5, -3)])
    for dtype in ("complex128", "complex64"):
        x = t("x", (None,), dtype)
        values = zs.astype(dtype)
        with np.errstate(all="ignore"):
            want = np.exp(values)
        got = run([x], vg.exp(x), [values])
        same(got, want, rtol=1e-15 if dtype == "complex128" else 1e-6)


def test_a_product_converts_a_transposed_operand_to_a_contiguous_one():
    """x.T @ w with x a 3-d int8 array (F-ordered as transposed) and w float16 or float32
    (seed 26378): the operand converted to w's dtype with numba's astype kept its F layout,
    which the row-flattened gemm refused (TypingError at compile)."""
    x = t("x", (None, None, None), "int8")
    rng = np.random.default_rng(26378)
    xs = rng.integers(-128, 128, size=(3, 2, 4), dtype="int8")
    for dtype in (F16, F32):
        w = t("w", (None, None), dtype)
        ws = rng.normal(size=(3, 5)).astype(dtype)
        same(run([x, w], [x.T @ w], [xs, ws])[0], xs.T @ ws, rtol=1e-3 if dtype == F16 else 1e-6)


def test_set_subtensor_checks_the_value_before_the_index_bounds():
    """numpy's setitem checks that the value broadcasts to the indexed shape before the index
    arrays' bounds (ValueError, not IndexError, where both are wrong; seed 28282); its
    `x[i] += v` reads x[i] first (IndexError). The same in the reference executor and the
    CPU programs (general loops, and the rows of a 2-d array picked by one index array)."""
    i = t("i", (None,), "int64")
    far, near = np.array([3, 2, 2]), np.array([0, 0, 0])
    x3, v3 = t("x3", (None, None, None), F32), t("v3", (None, None), F32)
    x2, v2 = t("x2", (None, None), F64), t("v2", (None, None), F64)
    cases = [(x3, v3, lambda x: x[i, ::-2, np.array([0])], (slice(None, None, -2), [0]),
              np.ones((1, 1, 1), F32), (3, 1)),
             (x2, v2, lambda x: x[i], (), np.ones((1, 2), F64), (3, 2))]
    for x, v, pick, rest, xs, shape in cases:
        dtype = xs.dtype
        good, bad = np.arange(np.prod(shape), dtype=dtype).reshape(shape), np.ones(
            (4,) + shape[1:], dtype)
        for update, both in ((vg.set_subtensor, ValueError), (vg.inc_subtensor, IndexError)):
            for mode in ("reference", "fast_run"):
                f = vg.compile([x, i, v], update(pick(x), v), mode=mode)
                with pytest.raises(both):  # out of bounds, and the value wrong
                    f(xs, far, bad)
                with pytest.raises(IndexError):  # out of bounds, the value right
                    f(xs, far, good)
                with pytest.raises(ValueError):  # in bounds, the value wrong
                    f(xs, near, bad)
                want = xs.copy()
                if update is vg.set_subtensor:
                    want[(near, *rest)] = good
                else:
                    np.add.at(want, (near, *rest), good)
                same(f(xs, near, good), want)


def test_uint64_indices_beyond_int64_are_not_wrapped_around():
    """A uint64 slice bound of 2**64 - 2 is that large a number in numpy (past the end; as an
    integer index, OverflowError); the CPU program read it as int64, -2 (seed 29384: an
    inc_subtensor of x[n:3] with no values raised ValueError, its slice one element long)."""
    x, n = t("x", (None,), "int64"), t("n", (), "uint64")
    xs, big = np.array([1, 5, 7], dtype="int64"), np.array(2**64 - 2, dtype="uint64")
    for mode in ("reference", "fast_run"):
        got = run([x, n], [x[n:3], x[:n], vg.inc_subtensor(x[n:3], np.zeros(0, "int64"))],
                  [xs, big], mode=mode)
        same(got[0], xs[2**64 - 2:3])
        same(got[1], xs[:2**64 - 2])
        same(got[2], xs)
        f = vg.compile([x, n], [x[n]], mode=mode)
        with pytest.raises(OverflowError):  # (numpy's, for an index past int64)
            f(xs, big)
        same(f(xs, np.array(1, dtype="uint64"))[0], xs[1])


# -- loops ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_complex_expm1_is_numpys(dtype):
    """Seed 5582: complex64 expm1 was computed in float64, where numpy's float32 exp
    overflows (89 + 1e-3j: numpy inf + inf j); and exp(z) - 1 lost a small z's digits."""
    x = t("x", (None,), dtype)
    v = np.array([1e-10 + 0j, 1e-10 + 1e-9j, 89.0 + 1e-3j, 100 + 0.5j, -1 + 2j, 0j,
                  -0.0 + 0j, np.inf + 0j, 3 - 1e-20j, -np.inf + 1j], dtype)
    with np.errstate(all="ignore"):
        want = np.expm1(v)
    same(run([x], vg.expm1(x), [v]), want, rtol=2e-6 if dtype == "complex64" else 1e-14)


def test_save_mem_leaves_a_statically_sliced_trace_alone():
    """scan_save_mem replaced `trace[1:]` (static length 2) by the kept entries' `[1:]` (static
    length 1), a type the graph refused (seed 165): where a slice's static length would
    change, the output keeps all of its entries."""
    x0 = t("x0", (2,), "int16")
    last = vg.scan(lambda s0, h: vg.where(vg.maximum(h, h), h, h).astype(h.dtype),
                   sequences=[x0], outputs_info=np.array(10.92623519897461, dtype=F32))[-1]
    values = [np.array([0, 0], dtype="int16")]
    same(run([x0], [last], values)[0], np.float32(10.92623519897461))
    same(run([x0], [last], values, mode="reference")[0], np.float32(10.92623519897461))


def test_a_loop_body_reads_an_element_of_a_sequence_as_an_array():
    """A 1-d sequence's elements reach the body as scalars; argmin asked whether such an input
    was contiguous, and the body knew nothing of it (seed 379, KeyError at compile)."""
    x0, x1 = t("x0", (None,), "bool"), t("x1", (None,), "uint8")
    v2 = vg.scan(lambda s0: vg.argmin(s0, axis=None, keepdims=False), sequences=[x0])
    v4 = vg.true_divide(x1, vg.softplus(v2))
    values = [np.array([False, True]), np.array([0, 7], dtype="uint8")]
    want = np.array([0, 7], np.uint8) / np.logaddexp(0, np.array([0, 0], np.int64))
    same(run([x0, x1], [v4], values)[0], want, rtol=1e-15)


def test_an_inner_graph_of_constants_lowers():
    """An OpFromGraph whose outputs ignore its inputs (seed 4699): its sub-program holds a step
    with no inputs, which the row-group search read the first input of (IndexError)."""
    i0, i1 = t("i0", (), "uint8"), t("i1", (), "bool")
    body = vg.sign(vg.where(np.array(3.55), 255, 2147483648))
    x0, x2 = t("x0", (), "uint8"), t("x2", (None,), "int64")
    v = vg.OpFromGraph([i0, i1], [body])(x0, x0 > 1)
    values = [np.array(37, dtype="uint8"), np.array([0, 1, 2], dtype="int64")]
    for mode in ("fast_run", "reference"):
        same(run([x0, x2], [v >= x2], values, mode=mode)[0], np.array([True, True, False]))


def test_an_inner_graph_broadcasts_at_run_time_in_the_general_program():
    """An OpFromGraph whose body broadcasts a length-1 input at run time (seed 24239): the
    general program called the body's specialized function, which raised RuntimeBroadcast
    again, with no general program left to run (TypeError). A general program's inner graphs
    are general too."""
    i0, i1 = t("i0", (None,), F64), t("i1", (None, None), F32)
    body = vg.softmax(vg.where(i1, 3.4e38, i0), axis=1)
    x, y = t("x", (None,), F64), t("y", (None, None), F32)
    f = vg.compile([x, y], [vg.OpFromGraph([i0, i1], [body])(x, y)])
    ys = np.array([[0, 1.5], [-1, 0], [0, 0]], dtype=F32)
    for xs in (np.array([2.5]), np.array([2.5, -1.0])):  # broadcast, then not
        w = np.where(ys, 3.4e38, xs)
        e = np.exp(w - w.max(axis=1, keepdims=True))
        same(f(xs, ys)[0], e / e.sum(axis=1, keepdims=True))


def test_complex_clip_gives_the_bound_on_a_tie():
    """clip of complex numbers (seed 6052): numpy's complex clip gives the bound where x equals
    it (-0+0j clipped below at 0 is 0j), unlike its real clip and its complex maximum and
    minimum, which keep x; NaN anywhere gives NaN."""
    x, lo, hi = t("x", (None,), "complex128"), t("lo", (None,), "bool"), t("hi", (), F64)
    nan = float("nan")
    values = [np.array([complex(-0.0, 0.0), complex(-0.0, -0.0), complex(0.0, -0.0),
                        complex(-0.0, -1.0), complex(256.0, -0.0), complex(256.0, 1.0),
                        complex(nan, 0.0), complex(3.0, 2.0)]),
              np.array([False] * 7 + [True]), np.array(256.0)]
    want = np.clip(*values)
    for mode in ("fast_run", "reference"):
        same(run([x, lo, hi], [vg.clip(x, lo, hi)], values, mode=mode)[0], want)
    values[2] = np.array(nan)
    same(run([x, lo, hi], [vg.clip(x, lo, hi)], values)[0], np.clip(*values))


def test_complex_values_set_into_bools_test_both_parts():
    """set_subtensor of complex values into a bool array (seed 8588): numpy's setitem makes
    a complex value true where either part is nonzero; the update kept the real part only
    (-0-9e18j became False)."""
    x, b = t("x", (None, None), "complex64"), t("b", (None, None), "bool")
    values = [np.array([[complex(-0.0, -9e18), complex(0.0, 1.0), complex(1e-45, 0.0), 0j]],
                       dtype="complex64"), np.ones((1, 4), dtype=bool)]
    want = values[1].copy()
    want[None][...] = values[0]
    for mode in ("fast_run", "reference"):
        same(run([x, b], [vg.set_subtensor(b[None,], x)], values, mode=mode)[0], want)


def test_index_arrays_of_an_empty_block_are_not_bounds_checked():
    """Advanced indexing whose index arrays broadcast to an empty block (seeds 8128, 8355):
    numpy reads none of their values, so it checks none of them (it still checks integers, and
    index arrays of a non-empty block when the rest of the result is empty); the fast_run
    program raised IndexError, at run time and, once shapes were specialized, at make_node."""
    x, i = t("x", (None, None), "complex64"), t("i", (None,), "int64")
    empty, zero = np.zeros((0,), dtype="int64"), np.array([0], dtype="int64")
    values = [np.zeros((0, 1), dtype="complex64"), empty]
    for mode in ("fast_run", "reference"):
        got = run([x, i], [x[zero, i], vg.inc_subtensor(x[zero, i], 1)], values, mode=mode)
        same(got[0], values[0][zero, empty])
        same(got[1], values[0])
    u = t("u", (None, None, None), "uint32")
    v = u[np.array([0, 0], dtype="int64"), u, 3:-3:-2]
    values = [np.zeros((0, 1, 1), dtype="uint32")]
    same(run([u], [v], values)[0], values[0][np.array([0, 0]), values[0], 3:-3:-2])
    f = vg.compile([x, i], [x[i, :]])
    for shape in ((2, 0), (0, 1)):  # a non-empty block is checked, the result empty or not
        with pytest.raises(IndexError, match="axis 0"):
            f(np.zeros(shape, dtype="complex64"), np.array([5]))


def test_an_update_of_a_reversed_view_of_known_length():
    """x[::-1] += x with x of a length LLVM knows (a broadcast to 28, seed 11161): the loop
    numba makes of `view[...] = view + v` crashed LLVM's vectorizer (an assertion: the process
    aborted). Updates are loops of their own now; a value sharing the view's storage is read
    as numpy reads it, as if copied first."""
    x = t("x", (None,), "float64")
    b = vg.broadcast_to(x, shape=(28,))
    outs = [vg.inc_subtensor(b[::-1], b), vg.set_subtensor(b[::-1], b),
            vg.inc_subtensor(b[::2], b[1::2]), vg.inc_subtensor(x[::-1], x)]
    values = [np.random.default_rng(11161).normal(size=28)]
    xs = values[0]
    want = []
    for update, dst, src in [("inc", slice(None, None, -1), slice(None)),
                             ("set", slice(None, None, -1), slice(None)),
                             ("inc", slice(None, None, 2), slice(1, None, 2)),
                             ("inc", slice(None, None, -1), slice(None))]:
        w = xs.copy()
        if update == "inc":
            w[dst] += w[src]
        else:
            w[dst] = w[src]
        want.append(w)
    for mode in ("fast_run", "reference"):
        for got, w in zip(run([x], outs, values, mode=mode), want):
            same(got, w)


def test_a_scatter_of_a_value_sharing_the_target_reads_it_as_before():
    """inc_subtensor(v[i], v) with a repeated index, in place over v (seed 12243): the loop
    read v's element after adding to it, 1 + 1 + 2 = 4 where numpy's as-if-copied value gives
    3. A value sharing the updated array's storage is copied first."""
    i, x = t("i", (None,), "int8"), t("x", (None,), "bool")
    v = vg.sqr(x)
    values = [np.array([0, 0], dtype="int8"), np.array([True])]
    want = np.square(values[1])
    np.add.at(want, values[0], np.square(values[1]))
    for mode in ("fast_run", "reference"):
        same(run([i, x], [vg.inc_subtensor(v[i,], v)], values, mode=mode)[0], want)


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64"])
def test_a_signed_square_that_wraps_is_negative_as_numpy_s(dtype):
    """Seed 14393: clip(sqr(x), -2.25, None) for int64 x whose square wraps. numba marks
    signed products 'nsw' (overflow undefined), so LLVM took x * x to be >= 0 and dropped the
    clip: -8.5e17 where numpy gives -2.25. sqr is a product in uint64, as mul is."""
    x = vg.tensor("x", shape=(None,), dtype=dtype)
    info = np.iinfo(dtype)
    a = np.array([info.min, info.max, 3, -4, info.max // 3 + 7, info.min // 2 - 1], dtype=dtype)
    outs = [vg.clip(vg.sqr(x), -2.25, None), vg.sqr(x) >= 0, vg.maximum(x * x, -1)]
    got = run([x], outs, [a])
    with np.errstate(over="ignore"):
        want = [np.clip(np.square(a), -2.25, None), np.square(a) >= 0, np.maximum(a * a, -1)]
    for g, w in zip(got, want):
        same(g, w)


def test_the_rows_of_a_slice_of_a_reversed_slice_in_a_loop_compile():
    """Seed 14293: a loop collecting s[-2::-1][0:1:-2] of each row. The trace's row length,
    allocated before the loop, was one expression of nested maximum/minimum terms whose
    arguments the text repeated: it doubled at every level, and numba's liveness analysis of
    the function ran out of memory (the fuzzer's worker was killed). Each term is a name of
    its own now."""
    x = vg.tensor("x", shape=(3, None), dtype="float64")
    out = vg.scan(lambda s: s[-2::-1][0:1:-2], sequences=[x])
    f = vg.compile([x], out)
    assert len(f.source()) < 20_000
    for n in (0, 1, 4):
        a = np.arange(3.0 * n).reshape(3, n)
        same(f(a), np.stack([r[-2::-1][0:1:-2] for r in a]))


def test_a_loop_that_stops_early_has_a_slot_of_its_own():
    """Seed 16605: a loop that stops early (vg.until) over constants, its trace's size folded
    to the 3 rows that ran, shared the slot of a (3, 2) array while its array holds rows for
    the most steps (4): the view of the slot raised RuntimeBroadcast in the specialized and
    then in the general program, which had none to turn to (TypeError). Outputs of such
    loops get a size of their own in the memory plan."""
    x0 = vg.tensor("x0", shape=(1, None, 2), dtype="float32")
    x1 = vg.tensor("x1", shape=(None, 3, 1), dtype="int64")
    x2 = vg.tensor("x2", shape=(None, None, None), dtype="float32")
    x3 = vg.tensor("x3", shape=(None, None), dtype="float64")
    v5 = vg.mean(vg.where(np.array([-7e18], dtype="float32"), x1, x0), axis=(0,))

    def body(s0, h):
        b2 = vg.where(-129, vg.clip(h, (2.5 - 1j), False), -1).astype(h.dtype)
        return b2, vg.until(vg.all(vg.eq(b2, h)))
    v7 = vg.scan(body, sequences=[v5], outputs_info=np.array([4.27, 16.1]))
    outs = [-vg.concatenate([x3, x3, v5, x3], axis=1), vg.softmax(x2, axis=2), v7]
    g = np.random.default_rng(0)
    values = [np.full((1, 3, 2), 156.9, "float32"),
              np.array([[[9223372036854775806], [0], [-1]]] * 3, dtype="int64"),
              g.normal(size=(3, 3, 2)).astype("float32"), g.normal(size=(3, 2))]
    with np.errstate(all="ignore"):
        got = run([x0, x1, x2, x3], outs, values)
        want = run([x0, x1, x2, x3], outs, values, mode="reference")
    for a, b in zip(got, want):
        same(a, b, rtol=1e-6)


def test_the_cumsum_of_a_complex_with_a_negative_zero_imaginary_part():
    """Seed 17010: cumsum's accumulator started at -0.0, as a complex (-0+0j): the imaginary
    part of (85211280-0j) came out 0.0. It starts at complex(-0.0, -0.0)."""
    x = vg.tensor("x", shape=(), dtype="complex128")
    y = vg.tensor("y", shape=(None,), dtype="complex64")
    a = np.array(complex(85211280, -0.0))
    b = np.array([complex(-0.0, -0.0), complex(1, -0.0), complex(-0.0, 0.0)], "complex64")
    got = run([x, y], [vg.cumsum(x, axis=None), vg.cumsum(y, axis=None)], [a, b])
    same(got[0], np.cumsum(a))
    same(got[1], np.cumsum(b))


def test_float16_maximum_and_minimum_keep_the_first_zero_as_numpy():
    """Seed 16900: numpy's float16 maximum and minimum return the first operand on a tie
    (maximum(-0.0, 0.0) is -0.0; its float32 and float64 loops return the second): verglas
    gave 0.0."""
    a = vg.tensor("a", shape=(None,), dtype=F16)
    b = vg.tensor("b", shape=(None, None), dtype=F16)
    outs = [vg.maximum(b, a), vg.maximum(a, b), vg.minimum(b, a), vg.minimum(a, b)]
    av = np.array([0.0], F16)
    bv = np.array([[-0.0], [1.0], [np.nan], [-2.0]], F16)
    got = run([a, b], outs, [av, bv])
    for g, w in zip(got, [np.maximum(bv, av), np.maximum(av, bv), np.minimum(bv, av),
                          np.minimum(av, bv)]):
        same(g, w)
    got = run([a, b], outs, [-av, np.abs(bv)])
    for g, w in zip(got, [np.maximum(np.abs(bv), -av), np.maximum(-av, np.abs(bv)),
                          np.minimum(np.abs(bv), -av), np.minimum(-av, np.abs(bv))]):
        same(g, w)


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_the_square_root_of_a_subnormal_complex(dtype):
    """Seed 16983: sqrt(5e-324j) raised ZeroDivisionError (numba's cmath.sqrt). The complex
    square root is numpy's (C99 csqrt), scaled where hypot would overflow or underflow, with
    C99's signed zeros, inf and NaN parts."""
    x = vg.tensor("x", shape=(None,), dtype=dtype)
    inf = np.inf
    values = np.array([5e-324j, 1e-310 + 1e-310j, -5e-324 + 0j, complex(0, -5e-324), 3 + 4j,
                       complex(-0.0, 0.0), complex(0.0, -0.0), complex(-0.0, -0.0),
                       complex(1e308, 1e308), complex(inf, 1), complex(-inf, -1),
                       complex(1, inf), complex(-4, 0), complex(-4, -0.0)], dtype=dtype)
    (got,) = run([x], [vg.sqrt(x)], [values])
    with np.errstate(all="ignore"):
        same(got, np.sqrt(values), rtol=1e-6 if dtype == "complex64" else 1e-15)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_clip_ties_follow_numpys_loop_for_its_bounds(dtype):
    """Seed 18516: clip(-0.0, lo, 1.5) with lo an array of zeros gave -0.0 where numpy gives
    0.0: with bounds of more than one value numpy's clip is maximum then minimum (a tie gives
    the bound), with one-value bounds its loop keeps x (ClipToBound, Clip); float16 keeps x
    in both."""
    x = vg.tensor("x", shape=(None, None), dtype=dtype)
    lo = vg.tensor("lo", shape=(1, None), dtype=dtype)
    hi = vg.tensor("hi", shape=(None, 1), dtype=dtype)
    one = vg.tensor("one", shape=(), dtype=dtype)
    outs = [vg.clip(x, lo, 1.5), vg.clip(x, -1.0, hi), vg.clip(x, one, 1.5), vg.clip(x, 0.0, 1.5)]
    xv = np.array([[-0.0, 0.0, 1.5, np.nan], [0.0, -0.0, -0.0, 2.0]], dtype)
    lv, hv, ov = np.zeros((1, 4), dtype), -np.zeros((2, 1), dtype), np.zeros((), dtype)
    got = run([x, lo, hi, one], outs, [xv, lv, hv, ov])
    for g, w in zip(got, [np.clip(xv, lv, 1.5), np.clip(xv, -1.0, hv), np.clip(xv, ov, 1.5),
                          np.clip(xv, 0.0, 1.5)]):
        same(g, w)


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_a_complex_power_of_zero_is_numpys(dtype):
    """Seed 20734: 0 ** (2.5 - 1j) gave NaN (numba's cpow) where numpy gives 0: a zero base
    gives 0 for an exponent of positive real part, NaN for the rest but a zero exponent, 1."""
    x = vg.tensor("x", shape=(None,), dtype=dtype)
    y = vg.tensor("y", shape=(None,), dtype=dtype)
    xs = np.array([0, 0, 0, 0, -0.0, 0, 2 + 1j, 0], dtype)
    ys = np.array([2.5 - 1j, 2, -1.5 + 1j, 1j, 3.0, 0, 0.5 - 2j, -2], dtype)
    (got,) = run([x, y], [x ** y], [xs, ys])
    with np.errstate(all="ignore"):
        same(got, xs ** ys, rtol=1e-5 if dtype == "complex64" else 1e-13)


def test_a_row_loop_calling_cmath_is_stored():
    """Seed 22924: a row loop with a complex tangent (cmath.tan) took the cmath module as an
    argument of its function, and storing the program's record of its callees failed: 'cannot
    pickle module'."""
    x = t("x", (None, None), F64)
    xv = np.array([[1.0, -0.5], [2.0, 0.25]])
    got = run([x], [vg.tan(x.astype("complex64")), x.var(axis=1)], [xv])
    same(got[0], np.tan(xv.astype("complex64")), rtol=1e-6)
    same(got[1], xv.var(axis=1), rtol=1e-12)


def test_a_float_constant_added_and_subtracted_still_rounds_away_small_values():
    """Seed 32715: (2**63 + x) - 2**63 in float32 was rewritten to x + 0.0, so a 1 survived
    where numpy's first sum rounds it away (0, and 0/0 is NaN downstream)."""
    x0 = t("x0", (None, None, None), F32)
    x1 = t("x1", (None,), F64)
    big = vg.full((3, 1, 4), 2 ** 63, F32)
    xv, yv = np.array([[[1.0]]], F32), np.array([0.0, 1.0, -2.0, 0.0])
    (got,) = run([x0, x1], [x1 / ((big + x0) - big)], [xv, yv])
    with np.errstate(all="ignore"):
        same(got, yv / ((np.full((3, 1, 4), 2 ** 63, F32) + xv) - np.float32(2 ** 63)))


def test_a_reduction_in_parts_inside_a_shared_kernel_names_its_own_variables():
    """Seed 33714: a whole-array reduction split into parts (schedule/pools.py) inside a shared
    reduction kernel named its part index p0, the kernel's input parameter: numba's
    TypingError."""
    x0 = t("x0", (None, None, None), "int32")
    x1 = t("x1", (None, None, None), "int32")
    v3 = vg.all(x1.std(axis=None, keepdims=True), axis=0, keepdims=True)
    v4 = v3 >> x0
    outs = [vg.concatenate([v4, x0, v4], axis=-2), x0.sum(), x1.sum()]
    a, b = np.array([[[-4]]], "int32"), np.array([[[-4, 3], [2, 9]]], "int32")
    got = run([x0, x1], outs, [a, b])
    v3n = np.all(b.std(keepdims=True), axis=0, keepdims=True)
    same(got[0], np.concatenate([v3n >> a, a, v3n >> a], axis=-2))
    same(got[1], a.sum())
    same(got[2], b.sum())


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_complex_trigonometry_of_infinities_and_nans_is_numpys(dtype):
    """Seed 34483: cos(nan + 0j) gave nan + nanj (numba's cmath) where numpy gives nan + 0j;
    cos, sin, tan and tanh of every pair of 0, -0, finite (above and below 1), +-inf and NaN
    parts now give numpy's (C99 Annex G, glibc's cases)."""
    vals = [0.0, -0.0, 0.5, 1.5, -2.0, np.inf, -np.inf, np.nan]
    zs = np.array([complex(a, b) for a in vals for b in vals], dtype)
    x = t("x", (None,), dtype)
    fns = [np.cos, np.sin, np.tan, np.tanh]
    got = run([x], [vg.cos(x), vg.sin(x), vg.tan(x), vg.tanh(x)], [zs])
    with np.errstate(all="ignore"):
        for g, fn in zip(got, fns):
            same(g, fn(zs), rtol=1e-6)


def test_a_sum_over_one_element_starts_from_plus_zero():
    """Seed 34707: a mean over a length-1 axis became its element, -0.0, where numpy's sum
    adds its identity (np.sum([-0.0], axis=0) is +0.0): also over no axes, and for complex."""
    x0 = t("x0", (None,), F32)
    c = t("c", (1, None), "complex128")
    v2 = vg.clip(vg.logsumexp(x0, axis=None, keepdims=True), -2.25, -0.0)
    outs = [vg.mean(v2, axis=0), vg.sum(v2, axis=()), vg.sum(c, axis=0)]
    xv, cv = np.array([9.0], F32), np.array([[complex(-0.0, -0.0), complex(1, -0.0)]])
    got = run([x0, c], outs, [xv, cv])
    v2n = np.clip(np.log(np.exp(xv).sum(keepdims=True)), -2.25, -0.0)
    same(got[0], np.mean(v2n, axis=0))
    same(got[1], np.sum(v2n, axis=()))
    same(got[2], np.sum(cv, axis=0))


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_complex_log1p_of_small_values_is_numpys(dtype):
    """Seed 35023: complex64 log1p(3.7e-7 + 0j) gave 3.70e-07 (computed in float64) where
    numpy's float32 steps give 3.58e-07; both backends now take numpy's steps (complex128:
    log of hypot(1 + re, im), not cmath's log1p-based log near |z| = 1)."""
    parts = [0.0, -0.0, 3.7e-7, -3.1e-7, 6.1e-5, 1e-12, -0.5, 2.0, np.inf, np.nan]
    zs = np.array([complex(a, b) for a in parts for b in parts], dtype)
    x = t("x", (None,), dtype)
    (got,) = run([x], [vg.log1p(x)], [zs])
    with np.errstate(all="ignore"):
        same(got, np.log1p(zs), rtol=2e-7 if dtype == "complex64" else 1e-15)
