"""softmax, log_softmax, logsumexp: numpy/scipy semantics, stability, gradients."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.special as sp
from hypothesis import given
from hypothesis import strategies as st

import verglas as vg
from tests.helpers import (SETTINGS, compare_to_numpy, dtypes, layouts, random_array, seeds,
                           shapes, with_layout)
from verglas.testing import verify_grad

FUNCS = {"softmax": (vg.softmax, sp.softmax), "log_softmax": (vg.log_softmax, sp.log_softmax)}


@SETTINGS
@given(shapes(min_dims=1, min_side=1), dtypes(("float32", "float64")), seeds(), layouts(),
       st.data(), st.sampled_from(sorted(FUNCS)), st.sampled_from([1.0, 1e4]))
def test_softmax_like(shape, dtype, seed, layout, data, name, scale):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = with_layout((random_array(np.random.default_rng(seed), "float64", shape) * scale)
                    .astype(dtype), layout)
    vfn, sfn = FUNCS[name]
    tol = 1e-4 if dtype == "float32" else 1e-10
    got = compare_to_numpy(lambda v: vfn(v, axis), lambda a: sfn(a, axis).astype(dtype), [x],
                           rtol=tol, atol=tol)
    assert np.isfinite(got).all()


@SETTINGS
@given(shapes(min_dims=0, min_side=1), dtypes(("float32", "float64")), seeds(), st.data(),
       st.booleans(), st.sampled_from([1.0, 1e4]))
def test_logsumexp(shape, dtype, seed, data, keepdims, scale):
    ndim = len(shape)
    axis = data.draw(st.one_of(st.none(), st.integers(-ndim, ndim - 1)) if ndim else st.none())
    keepdims = keepdims and ndim > 0  # scipy gives a 0-d input's keepdims result shape (1,)
    x = (random_array(np.random.default_rng(seed), "float64", shape) * scale).astype(dtype)
    tol = 1e-4 if dtype == "float32" else 1e-10
    compare_to_numpy(lambda v: vg.logsumexp(v, axis, keepdims),
                     lambda a: np.asarray(sp.logsumexp(a, axis, keepdims=keepdims)).astype(dtype),
                     [x], rtol=tol, atol=tol)


def test_infinities_as_scipy():
    x = np.array([[-np.inf, -np.inf, -np.inf], [-np.inf, 0.0, 1.0], [np.inf, 1.0, 2.0],
                  [1e308, 1e308, 0.0]])
    compare_to_numpy(lambda v: vg.logsumexp(v, 1), lambda a: sp.logsumexp(a, 1), [x])
    compare_to_numpy(lambda v: vg.logsumexp(v), lambda a: np.asarray(sp.logsumexp(a[:2])),
                     [x[:2]])
    compare_to_numpy(lambda v: vg.log_softmax(v), lambda a: sp.log_softmax(a, -1), [x[1:2]])
    compare_to_numpy(lambda v: vg.softmax(v), lambda a: sp.softmax(a, -1), [x[1:2]])


def test_integer_inputs_become_float64():
    x = np.array([[1, 2, 3], [4, 5, 9]], dtype="int32")
    compare_to_numpy(vg.softmax, lambda a: sp.softmax(a, -1), [x])
    compare_to_numpy(lambda v: vg.logsumexp(v, 0), lambda a: sp.logsumexp(a, 0), [x])


def test_axis_errors():
    x = vg.tensor("x", shape=(2, 3))
    with pytest.raises(ValueError, match="softmax: axis 2 is out of range"):
        vg.softmax(x, 2)
    with pytest.raises(ValueError, match="logsumexp: axis -3"):
        vg.logsumexp(x, -3)


# -- gradients ------------------------------------------------------------------------------------
RNG = np.random.default_rng(11)


@pytest.mark.parametrize("fn", [
    lambda v: vg.softmax(v), lambda v: vg.softmax(v, 0), lambda v: vg.log_softmax(v),
    lambda v: vg.log_softmax(v, 0), lambda v: vg.logsumexp(v), lambda v: vg.logsumexp(v, 1),
    lambda v: vg.logsumexp(v, 0, keepdims=True),
])
def test_gradients(fn):
    verify_grad(fn, [RNG.normal(size=(3, 4))])


def test_logsumexp_gradient_is_softmax_for_large_inputs():
    x = vg.tensor("x", shape=(None, None))
    a = RNG.normal(size=(3, 4)) * 1e4
    f = vg.compile([x], [vg.grad(vg.sum(vg.logsumexp(x, 1)), x),
                         vg.grad(vg.sum(vg.log_softmax(x) * np.arange(4.0)), x),
                         vg.grad(vg.sum(vg.softmax(x) * np.arange(4.0)), x)], mode="reference")
    g_lse, g_ls, g_sm = f(a)
    np.testing.assert_allclose(g_lse, sp.softmax(a, 1), atol=1e-12)
    for g in (g_lse, g_ls, g_sm):
        assert np.isfinite(g).all()
    verify_grad(lambda v: vg.logsumexp(v * 1e4, 1), [RNG.normal(size=(2, 3)) * 1e-3],
                   rtol=1e-4, atol=1e-6)


def test_softmax_cross_entropy_gradient():
    labels = np.eye(4)[[0, 3, 1]]

    def loss(logits):
        return -vg.mean(vg.sum(labels * vg.log_softmax(logits), axis=1))

    logits = RNG.normal(size=(3, 4))
    verify_grad(loss, [logits])
    x = vg.tensor("x", shape=(3, 4))
    g = vg.compile([x], vg.grad(loss(x), x), mode="reference")(logits)
    np.testing.assert_allclose(g, (sp.softmax(logits, 1) - labels) / 3, atol=1e-12)


@pytest.mark.parametrize("fn", [lambda x: vg.softmax(x, axis=-1) * x,
                                lambda x: vg.log_softmax(x, axis=-1),
                                lambda x: vg.logsumexp(x, axis=-1, keepdims=True)])
def test_gradient_has_no_pass_over_the_maximum(fn):
    """The shift by the maximum is a stop_gradient: the gradient program reads no mask of
    the maximum's positions (one Max, the forward one), and is still right."""
    from verglas.graph import FunctionGraph
    from verglas.ops.reduce import Max
    from verglas.rewrite import get_mode, rewrite_graph

    x = vg.tensor("x", shape=(None, None, None), dtype="float64")
    cost = vg.sum(fn(x) * vg.constant(np.arange(4.0)))
    (g,) = vg.grad(cost, [x])
    fg = rewrite_graph(FunctionGraph([x], [g], clone=True), get_mode("fast_run"))
    ops = [n.op for n in fg.toposort()]
    assert sum(isinstance(op, Max) for op in ops) == 1
    assert not any("stop_gradient" in str(op) for op in ops)
    data = np.random.default_rng(3).normal(size=(2, 3, 4))
    data[0, 0] = [0.5, 0.0, 1.0, 1.0]  # a tie at the maximum
    verify_grad(lambda v: vg.sum(fn(v) * vg.constant(np.arange(4.0))),
                [np.random.default_rng(4).normal(size=(2, 3, 4))])
    (gt,) = vg.grad(cost, [x])
    got = vg.compile([x], gt, mode="reference")(data)
    assert np.all(np.isfinite(got))
    ties = data.copy()
    ties[0, 0, 2] += 1e-7  # the tie broken: the gradient moves by O(1e-7) only
    near = vg.compile([x], gt, mode="reference")(ties)
    np.testing.assert_allclose(got, near, atol=1e-5)
