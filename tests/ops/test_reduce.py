"""Reductions against numpy: dtypes, axes, keepdims, empty axes, layouts, gradients."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import verglas as vg
from tests.helpers import (SETTINGS, compare_to_numpy, dtypes, layouts, random_array, seeds,
                           shapes, symbolic_shape, with_layout)
from tests.ops.shape_check import check_infer_shape
from verglas.ops import reduce as r
from verglas.testing import verify_grad

REDUCTIONS = {
    "sum": (vg.sum, np.sum), "prod": (vg.prod, np.prod), "max": (vg.max, np.max),
    "min": (vg.min, np.min), "any": (vg.any, np.any), "all": (vg.all, np.all),
    "mean": (vg.mean, np.mean), "var": (vg.var, np.var), "std": (vg.std, np.std),
}


@st.composite
def axis_for(draw, ndim):
    """None, a (possibly negative) int, or a tuple of distinct axes."""
    if ndim == 0:
        return draw(st.sampled_from([None, ()]))
    kind = draw(st.sampled_from(["none", "int", "tuple"]))
    if kind == "none":
        return None
    if kind == "int":
        return draw(st.integers(-ndim, ndim - 1))
    axes = draw(st.lists(st.integers(0, ndim - 1), unique=True, max_size=ndim))
    return tuple(a - ndim if draw(st.booleans()) else a for a in axes)


@SETTINGS
@given(st.data(), st.sampled_from(sorted(REDUCTIONS)), shapes(min_side=1), dtypes(), seeds(),
       layouts(), st.booleans())
def test_reduction_matches_numpy(data, name, shape, dtype, seed, layout, keepdims):
    vfn, nfn = REDUCTIONS[name]
    axis = data.draw(axis_for(len(shape)))
    x = with_layout(random_array(np.random.default_rng(seed), dtype, shape, -3, 4), layout)
    static = data.draw(symbolic_shape(shape))
    rtol = 1e-4 if dtype == "float32" else None
    compare_to_numpy(lambda v: vfn(v, axis=axis, keepdims=keepdims),
                     lambda a: np.asarray(nfn(a, axis=axis, keepdims=keepdims)), [x],
                     static_shapes=[static], rtol=rtol, atol=rtol)


@pytest.mark.parametrize("dtype,expected", [("int32", "int64"), ("bool", "int64"),
                                            ("float32", "float32"), ("uint8", "uint64")])
def test_sum_dtypes(dtype, expected):
    x = vg.tensor("x", shape=(3,), dtype=dtype)
    assert vg.sum(x).dtype == expected == np.sum(np.zeros(3, dtype)).dtype.name
    assert vg.prod(x).dtype == np.prod(np.zeros(3, dtype)).dtype.name
    assert vg.cumsum(x).dtype == np.cumsum(np.zeros(3, dtype)).dtype.name


@pytest.mark.parametrize("dtype", ["int32", "int64", "bool", "float32", "float64"])
def test_mean_var_dtypes(dtype):
    x = vg.tensor("x", shape=(None, 2), dtype=dtype)
    a = random_array(np.random.default_rng(0), dtype, (3, 2))
    for vfn, nfn in (REDUCTIONS["mean"], REDUCTIONS["var"], REDUCTIONS["std"]):
        assert vfn(x, 0).dtype == nfn(a, 0).dtype.name
        compare_to_numpy(lambda v: vfn(v, 0), lambda v: nfn(v, 0), [a])


@pytest.mark.parametrize("name", ["sum", "prod", "any", "all"])
def test_empty_axis_gives_identity(name):
    vfn, nfn = REDUCTIONS[name]
    x = np.zeros((3, 0), dtype="float64")
    compare_to_numpy(lambda v: vfn(v, axis=1), lambda a: nfn(a, axis=1), [x])
    compare_to_numpy(lambda v: vfn(v), lambda a: np.asarray(nfn(a)), [x])


@pytest.mark.parametrize("fn", [vg.max, vg.min, vg.argmax, vg.argmin])
def test_empty_axis_without_identity_raises(fn):
    x = vg.tensor("x", shape=(None, None))
    f = vg.compile([x], fn(x, axis=1), mode="reference")
    with pytest.raises(ValueError, match=r"(Max|Min|Argmax|Argmin)"):
        f(np.zeros((3, 0)))
    assert f(np.zeros((0, 2))).shape == (0,)  # an empty non-reduced axis is fine
    with pytest.raises(ValueError, match=r"(Max|Min|Argmax|Argmin).*\(3, 0\)"):
        fn(vg.tensor("y", shape=(3, 0)), axis=1)  # statically empty: at construction


@SETTINGS
@given(shapes(min_side=1), dtypes(("float32", "float64", "int32", "bool")), seeds(),
       st.data(), st.booleans(), st.sampled_from(["argmax", "argmin"]))
def test_argmax_argmin(shape, dtype, seed, data, keepdims, name):
    axis = data.draw(st.one_of(st.none(), st.integers(-len(shape), len(shape) - 1))
                     if shape else st.none())
    x = random_array(np.random.default_rng(seed), dtype, shape, -2, 2)  # many ties
    vfn, nfn = getattr(vg, name), getattr(np, name)
    compare_to_numpy(lambda v: vfn(v, axis=axis, keepdims=keepdims),
                     lambda a: np.asarray(nfn(a, axis=axis, keepdims=keepdims)), [x])


@SETTINGS
@given(shapes(max_dims=3), dtypes(("float32", "float64", "int32", "bool")), seeds(), st.data(),
       layouts())
def test_cumsum(shape, dtype, seed, data, layout):
    axis = data.draw(st.one_of(st.none(), st.integers(-len(shape), len(shape) - 1))
                     if shape else st.none())
    x = with_layout(random_array(np.random.default_rng(seed), dtype, shape), layout)
    compare_to_numpy(lambda v: vg.cumsum(v, axis), lambda a: np.cumsum(a, axis), [x],
                     rtol=1e-4 if dtype == "float32" else None, atol=1e-4)
    compare_to_numpy(lambda v: vg.cumsum(v, axis), lambda a: np.cumsum(a, axis), [x],
                     static_shapes=[shape], rtol=1e-4 if dtype == "float32" else None,
                     atol=1e-4)


def test_nan_propagates_through_max():
    x = np.array([[1.0, np.nan, 3.0], [1.0, 2.0, 0.5]])
    compare_to_numpy(lambda v: vg.max(v, 1), lambda a: np.max(a, 1), [x])
    compare_to_numpy(lambda v: vg.argmin(v, 1), lambda a: np.argmin(a, 1), [x])


def test_construction_errors():
    x = vg.tensor("x", shape=(2, 3))
    with pytest.raises(ValueError, match="sum: axis 2 is out of range"):
        vg.sum(x, 2)
    with pytest.raises(ValueError, match="repeated axis"):
        vg.max(x, (0, -2))
    with pytest.raises(TypeError, match="argmax"):
        vg.argmax(x, (0, 1))
    with pytest.raises(ValueError, match="cumsum"):
        vg.cumsum(x, -3)
    with pytest.raises(TypeError, match="not an integer"):
        vg.sum(x, 1.0)


def test_static_shapes_and_props():
    x = vg.tensor("x", shape=(2, None, 4))
    assert vg.sum(x, (0, -1)).type.shape == (None,)
    assert vg.max(x, 1, keepdims=True).type.shape == (2, 1, 4)
    assert vg.argmax(x, keepdims=True).type.shape == (1, 1, 1)
    assert vg.cumsum(vg.tensor("y", shape=(2, 3))).type.shape == (6,)
    op = vg.sum(x, -1).owner.op
    assert op == r.Sum((2,), False) and hash(op) == hash(r.Sum((2,), False))
    match op:
        case r.Sum(axis, keepdims):
            assert axis == (2,) and keepdims is False


@pytest.mark.parametrize("fn", [
    lambda v: vg.sum(v, 1), lambda v: vg.max(v, (0, 2), keepdims=True),
    lambda v: vg.argmax(v), lambda v: vg.argmin(v, -1, keepdims=True),
    lambda v: vg.cumsum(v), lambda v: vg.cumsum(v, 1), lambda v: vg.prod(v, keepdims=True),
])
def test_infer_shape(fn):
    x = np.random.default_rng(0).normal(size=(2, 3, 4))
    check_infer_shape(fn, [x])


# -- gradients ------------------------------------------------------------------------------------
RNG = np.random.default_rng(42)


@pytest.mark.parametrize("fn", [
    lambda v: vg.sum(v), lambda v: vg.sum(v, (0, 2)), lambda v: vg.sum(v, -1, keepdims=True),
    lambda v: vg.mean(v, 1), lambda v: vg.var(v, (0, 1)), lambda v: vg.std(v, -1),
    lambda v: vg.prod(v, 1), lambda v: vg.prod(v, keepdims=True),
    lambda v: vg.max(v, 2), lambda v: vg.min(v, (0, 1), keepdims=True),
    lambda v: vg.cumsum(v), lambda v: vg.cumsum(v, -2),
])
def test_reduction_gradients(fn):
    verify_grad(fn, [RNG.uniform(0.5, 2.0, size=(2, 3, 4))])


def test_max_ties_share_gradient_equally():
    x = vg.tensor("x", shape=(2, 3))
    g = vg.grad(vg.sum(vg.max(x, 1) * np.array([1.0, 2.0])), x)
    got = vg.compile([x], g, mode="reference")(np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]]))
    np.testing.assert_allclose(got, [[0, 0.5, 0.5], [2 / 3, 2 / 3, 2 / 3]])
    # finite differences agree with two-way ties (a one-sided bump moves the max by half)
    verify_grad(lambda v: vg.max(v, 1), [np.array([[1.0, 3.0, 3.0], [5.0, 2.0, 5.0]])])
    verify_grad(lambda v: vg.min(v), [np.array([[1.0, 3.0, 1.0], [5.0, 2.0, 5.0]])])


def test_prod_gradient_with_zeros():
    point = np.array([[1.5, 0.0, 2.0], [0.0, 0.0, 3.0], [1.0, 2.0, 3.0]])
    verify_grad(lambda v: vg.prod(v, 1), [point])
    x = vg.tensor("x", shape=(3, 3))
    g = vg.compile([x], vg.grad(vg.sum(vg.prod(x, 1)), x), mode="reference")(point)
    np.testing.assert_allclose(g, [[0, 3.0, 0], [0, 0, 0], [6, 3, 2]])
    assert np.isfinite(g).all()


def test_integer_reductions_have_no_gradient_path():
    x = vg.tensor("x", shape=(3,), dtype="int32")
    assert r.Sum((0,)).L_op([x], [vg.sum(x)], [vg.constant(1.0)]) == [None]
    assert vg.argmax(vg.tensor("y", shape=(3,))).owner.op.L_op([x], [None], [None]) == [None]
