"""reshape, broadcast_to, Alloc (zeros/ones/full), concatenate, stack, arange and x.shape."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import verglas as vg
from tests.helpers import (SETTINGS, compare_to_numpy, dtypes, layouts, random_array, seeds,
                           shapes, symbolic_shape, with_layout)
from tests.ops.shape_check import check_infer_shape
from verglas.ops import shape as sh
from verglas.testing import verify_grad


@st.composite
def reshape_case(draw):
    shape = draw(shapes(max_dims=3, max_side=4))
    size = int(np.prod(shape))
    # a random factorisation of the size, possibly with one -1
    ndim = draw(st.integers(0 if size == 1 else 1, 3))
    dims, rest = [], size
    for _ in range(ndim - 1):
        d = draw(st.sampled_from([d for d in range(1, 5) if rest % d == 0] or [1]))
        if size == 0:
            d = draw(st.integers(0, 3))
        dims.append(d)
        rest = rest // d if d and size else rest
    if ndim:
        dims.append(rest if size else 0)
        if 0 not in dims and draw(st.booleans()):
            dims[draw(st.integers(0, ndim - 1))] = -1
    return shape, tuple(dims)


@SETTINGS
@given(reshape_case(), dtypes(), seeds(), layouts(), st.data())
def test_reshape(case, dtype, seed, layout, data):
    shape, new = case
    x = with_layout(random_array(np.random.default_rng(seed), dtype, shape), layout)
    static = data.draw(symbolic_shape(shape))
    compare_to_numpy(lambda v: vg.reshape(v, new), lambda a: np.reshape(a, new), [x],
                     static_shapes=[static])
    out = vg.reshape(vg.tensor("x", shape=shape, dtype=dtype), new)
    assert out.type.shape == np.reshape(x, new).shape  # fully static when the input is


def test_reshape_symbolic_dims_and_vector():
    x = vg.tensor("x", shape=(None, 6))
    n = vg.scalar("n", dtype="int64")
    a = np.arange(12.0).reshape(2, 6)
    f = vg.compile([x, n], [x.reshape((n, -1)), vg.reshape(x, x.shape[::-1]),
                            vg.reshape(x, (x.shape[0] * 3, 2)), x.flatten()], mode="reference")
    r1, r2, r3, r4 = f(a, 4)
    np.testing.assert_array_equal(r1, a.reshape(4, -1))
    np.testing.assert_array_equal(r2, a.reshape(6, 2))
    np.testing.assert_array_equal(r3, a.reshape(6, 2))
    np.testing.assert_array_equal(r4, a.ravel())
    assert vg.reshape(x, (n, 3, 2)).type.shape == (None, 3, 2)
    assert vg.reshape(x, (-1, 3)).type.shape == (None, 3)
    check_infer_shape(lambda v: vg.reshape(v, (-1, 3)), [a])
    check_infer_shape(lambda v: vg.reshape(v, (3, -1)), [a])
    check_infer_shape(lambda v: vg.reshape(v, v.shape[::-1]), [a])
    assert vg.reshape(vg.tensor("y", shape=(2, 3)), (2, 3)).owner is None  # no-op


def test_reshape_errors():
    x = vg.tensor("x", shape=(2, 3))
    with pytest.raises(ValueError, match=r"Reshape.*\(2, 3\).*\(4, 2\)"):
        vg.reshape(x, (4, 2))
    with pytest.raises(ValueError, match=r"more than one -1"):
        vg.reshape(x, (-1, -1))
    with pytest.raises(ValueError, match=r"Reshape.*\(2, 3\)"):
        vg.reshape(x, (4, -1))
    with pytest.raises(TypeError, match="reshape"):
        vg.reshape(x, (2.0, 3))
    y = vg.tensor("y", shape=(None, 3))
    f = vg.compile([y], vg.reshape(y, (4, 2)), mode="reference")
    with pytest.raises(ValueError, match=r"Reshape.*\(2, 3\)"):
        f(np.zeros((2, 3)))


def test_reshape_is_a_view_op():
    assert sh.Reshape.view_map == {0: [0]}
    x = vg.tensor("x", shape=(None,))
    match vg.reshape(x, (2, -1)).owner.op:
        case sh.Reshape(ndim):
            assert ndim == 2


@SETTINGS
@given(st.data(), dtypes(), seeds(), layouts())
def test_broadcast_to(data, dtype, seed, layout):
    target = data.draw(shapes(max_dims=4))
    # a source shape that broadcasts to target
    k = data.draw(st.integers(0, len(target)))
    src = tuple(data.draw(st.sampled_from([1, d])) for d in target[len(target) - k:])
    x = with_layout(random_array(np.random.default_rng(seed), dtype, src), layout)
    static = data.draw(symbolic_shape(src))
    compare_to_numpy(lambda v: vg.broadcast_to(v, target), lambda a: np.broadcast_to(a, target),
                     [x], static_shapes=[static])


def test_broadcast_to_errors_and_symbolic():
    x = vg.tensor("x", shape=(3,))
    with pytest.raises(ValueError, match=r"Alloc.*\(3,\).*\(2, 4\)"):
        vg.broadcast_to(x, (2, 4))
    with pytest.raises(ValueError, match="broadcast_to"):
        vg.broadcast_to(vg.tensor("y", shape=(2, 3)), (3,))
    y = vg.tensor("y", shape=(None,))
    n = vg.scalar("n", dtype="int32")
    f = vg.compile([y, n], vg.broadcast_to(y, (n, y.shape[0])), mode="reference")
    np.testing.assert_array_equal(f(np.arange(3.0), 2), np.broadcast_to(np.arange(3.0), (2, 3)))
    with pytest.raises(ValueError, match="Alloc"):
        vg.compile([y], vg.broadcast_to(y, (2, 4)), mode="reference")(np.zeros(3))
    check_infer_shape(lambda v: vg.broadcast_to(v, (2, 4, v.shape[0])), [np.zeros(3)])


@pytest.mark.parametrize("fn,ref", [
    (lambda: vg.zeros((2, 3)), lambda: np.zeros((2, 3))),
    (lambda: vg.ones(4, dtype="int32"), lambda: np.ones(4, dtype="int32")),
    (lambda: vg.full((2, 2), 7), lambda: np.full((2, 2), 7)),
    (lambda: vg.full((2,), 1.5, "float32"), lambda: np.full((2,), 1.5, "float32")),
    (lambda: vg.full((), True), lambda: np.full((), True)),
    (lambda: vg.zeros((0, 3), "bool"), lambda: np.zeros((0, 3), "bool")),
])
def test_zeros_ones_full(fn, ref):
    out = fn()
    expected = ref()
    assert out.type.shape == expected.shape and out.dtype == expected.dtype.name
    got = vg.compile([], out, mode="reference")()
    np.testing.assert_array_equal(got, expected)
    assert got.dtype == expected.dtype


def test_full_symbolic():
    x = vg.tensor("x", shape=(None, 2), dtype="float32")
    v = vg.scalar("v", dtype="float32")
    out = vg.full((x.shape[0], 3), v)
    assert out.dtype == "float32" and out.type.shape == (None, 3)
    got = vg.compile([x, v], [out, vg.zeros(x.shape)], mode="reference")(np.zeros((4, 2), "f4"), 2)
    np.testing.assert_array_equal(got[0], np.full((4, 3), 2, "float32"))
    np.testing.assert_array_equal(got[1], np.zeros((4, 2)))
    with pytest.raises(ValueError, match="Alloc"):
        vg.zeros((-1, 2))


@SETTINGS
@given(st.data(), st.integers(1, 3), st.lists(dtypes(), min_size=1, max_size=3), seeds(),
       layouts())
def test_concatenate(data, ndim, dts, seed, layout):
    rng = np.random.default_rng(seed)
    axis = data.draw(st.integers(-ndim, ndim - 1))
    base = data.draw(shapes(min_dims=ndim, max_dims=ndim))
    arrays = []
    for d in dts:
        shp = list(base)
        shp[axis] = data.draw(st.integers(0, 3))
        arrays.append(with_layout(random_array(rng, d, shp), layout))
    statics = [data.draw(symbolic_shape(a.shape)) for a in arrays]
    compare_to_numpy(lambda *vs: vg.concatenate(vs, axis),
                     lambda *a: np.concatenate(a, axis), arrays, static_shapes=statics)
    check_infer_shape(lambda *vs: vg.concatenate(vs, axis), arrays)


@SETTINGS
@given(st.data(), st.integers(1, 3), dtypes(), seeds(), shapes(max_dims=3))
def test_stack(data, n, dtype, seed, shape):
    rng = np.random.default_rng(seed)
    axis = data.draw(st.integers(-len(shape) - 1, len(shape)))
    arrays = [random_array(rng, dtype, shape) for _ in range(n)]
    compare_to_numpy(lambda *vs: vg.stack(vs, axis), lambda *a: np.stack(a, axis), arrays)


def test_concatenate_stack_errors():
    a, b = vg.tensor("a", shape=(2, 3)), vg.tensor("b", shape=(2, 4))
    with pytest.raises(ValueError, match=r"Join.*\(2, 3\), \(2, 4\).*axis 1"):
        vg.concatenate([a, b], 0)
    assert vg.concatenate([a, b], 1).type.shape == (2, 7)
    with pytest.raises(ValueError, match="concatenate: axis 2 is out of range"):
        vg.concatenate([a, b], 2)
    with pytest.raises(ValueError, match="Join"):
        vg.concatenate([a, vg.tensor("c", shape=(2,))])
    with pytest.raises(ValueError, match="stack"):
        vg.stack([a, b])
    x, y = vg.tensor("x", shape=(None,)), vg.tensor("y", shape=(None,))
    f = vg.compile([x, y], vg.stack([x, y]), mode="reference")
    with pytest.raises(ValueError, match="Join"):
        f(np.zeros(2), np.zeros(3))


def test_as_tensor_of_variables_stacks():
    s, t = vg.scalar("s"), vg.scalar("t")
    v = vg.as_tensor([s, t, 3.0])
    assert v.type.shape == (3,)
    np.testing.assert_array_equal(vg.compile([s, t], v, mode="reference")(1.0, 2.0),
                                  [1.0, 2.0, 3.0])


@pytest.mark.parametrize("args,kw", [
    ((5,), {}), ((2, 7), {}), ((1, 10, 3), {}), ((10, 1, -2), {}), ((0.5, 3.0, 0.5), {}),
    ((5,), {"dtype": "float32"}), ((3, 1), {}), ((1, 2, 0.3), {}), ((0, -3, -1), {}),
])
def test_arange_constant(args, kw):
    out = vg.arange(*args, **kw)
    expected = np.arange(*args, **kw)
    assert out.type.shape == expected.shape and out.dtype == expected.dtype.name
    np.testing.assert_allclose(vg.compile([], out, mode="reference")(), expected)


def test_arange_symbolic():
    n = vg.scalar("n", dtype="int64")
    s = vg.scalar("s", dtype="float64")
    out = vg.arange(1, n, 2)
    assert out.type.shape == (None,) and out.dtype == "int64"
    f = vg.compile([n, s], [out, vg.arange(s, 3.0, 0.25)], mode="reference")
    for k in (0, 1, 2, 7, 8):
        a, b = f(k, -1.1)
        np.testing.assert_array_equal(a, np.arange(1, k, 2))
        np.testing.assert_allclose(b, np.arange(-1.1, 3.0, 0.25))
    x = vg.tensor("x", shape=(None,))
    check_infer_shape(lambda v: vg.arange(0, v.shape[0], 3), [np.zeros(7)])
    check_infer_shape(lambda v: vg.arange(v.shape[0], -2, -1), [np.zeros(5)])
    with pytest.raises(ValueError, match="step is zero"):
        vg.arange(0, 3, 0)
    del x


def test_shape_indexing():
    x = vg.tensor("x", shape=(None, 3, None))
    i = vg.scalar("i", dtype="int32")
    outs = [x.shape[0], x.shape[-2], x.shape[i], x.shape[1:], x.shape[::-1], x.size]
    assert outs[1].owner is None and int(outs[1].data) == 3  # static: a constant
    a = np.zeros((2, 3, 5))
    got = vg.compile([x, i], outs, mode="reference")(a, -1)
    assert [np.asarray(g).tolist() for g in got] == [2, 3, 5, [3, 5], [5, 3, 2], 30]
    with pytest.raises(IndexError, match="out of bounds"):
        x.shape[3]


# -- gradients ------------------------------------------------------------------------------------
RNG = np.random.default_rng(7)


@pytest.mark.parametrize("fn,shapes_", [
    (lambda v: vg.reshape(v, (3, -1)) * np.arange(4.0), [(2, 6)]),
    (lambda v: vg.reshape(v, (v.shape[1], v.shape[0])), [(2, 3)]),
    (lambda v: vg.broadcast_to(v, (4, 2, 3)), [(2, 1)]),
    (lambda v: vg.broadcast_to(v, (2, 3)), [(3,)]),
    (lambda v: vg.full((2, 3), v), [()]),
    (lambda a, b: vg.concatenate([a, b, a], 1), [(2, 3), (2, 1)]),
    (lambda a, b: vg.stack([a, b], -1), [(2, 3), (2, 3)]),
])
def test_shape_gradients(fn, shapes_):
    verify_grad(fn, [RNG.normal(size=s) for s in shapes_])


def test_broadcast_to_gradient_symbolic_shape():
    # the input's length-1 axis is only known at run time
    verify_grad(lambda v: vg.broadcast_to(v[:, :1], (2, 4, 1)) * 2.0, [RNG.normal(size=(4, 3))])
