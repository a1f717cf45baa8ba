"""vg.grad: every differentiable elementwise op against finite differences (verify_grad, float64),
broadcasting summed back (static and run-time), integer and disconnected inputs, ties."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import verglas as vg
from tests.helpers import SETTINGS, broadcastable_shapes, seeds
from verglas.grad import DisconnectedInputError
from verglas.graph.basic import Apply, Variable
from verglas.graph.op import Op
from verglas.testing import GradientError, verify_grad

FEW = settings(SETTINGS, max_examples=12)


def _ref(inputs, outputs):
    return vg.compile(inputs, outputs, mode="reference")


# name -> (function of the variables, (low, high) domain per input) where the op is smooth
UNARY = {
    "neg": (vg.neg, (-2, 2)), "abs": (vg.abs, (0.2, 2)), "abs_neg": (vg.abs, (-2, -0.2)),
    "exp": (vg.exp, (-2, 2)), "log": (vg.log, (0.2, 3)), "log1p": (vg.log1p, (-0.5, 2)),
    "expm1": (vg.expm1, (-2, 2)), "sqrt": (vg.sqrt, (0.2, 3)), "sqr": (vg.sqr, (-2, 2)),
    "sin": (vg.sin, (-3, 3)), "cos": (vg.cos, (-3, 3)), "tan": (vg.tan, (-1.2, 1.2)),
    "tanh": (vg.tanh, (-2, 2)), "sigmoid": (vg.sigmoid, (-4, 4)),
    "softplus": (vg.softplus, (-4, 4)), "erf": (vg.erf, (-2, 2)),
    "reciprocal": (vg.reciprocal, (0.3, 2)), "sign": (vg.sign, (0.1, 2)),
    "floor": (vg.floor, (0.1, 0.9)), "ceil": (vg.ceil, (1.1, 1.9)),
    "neg_operator": (lambda x: -x, (-2, 2)), "abs_operator": (lambda x: abs(x), (0.2, 2)),
    "scalar_ops": (lambda x: 2.0 * x - 1 / (x + 3) + x ** 2 + 3 ** x, (0.1, 2)),
    "softplus_large": (vg.softplus, (25, 40)),
    "astype": (lambda x: x.astype("float64") * 2, (-2, 2)),
}

BINARY = {
    "add": (vg.add, (-2, 2), (-2, 2)), "sub": (vg.sub, (-2, 2), (-2, 2)),
    "mul": (vg.mul, (-2, 2), (-2, 2)), "true_divide": (vg.true_divide, (-2, 2), (0.5, 2)),
    "power": (vg.power, (0.3, 2), (-2, 2)), "maximum": (vg.maximum, (0, 1), (2, 3)),
    "maximum_rev": (vg.maximum, (2, 3), (0, 1)), "minimum": (vg.minimum, (0, 1), (2, 3)),
    "mod": (vg.mod, (0.1, 0.9), (1.0, 2.0)), "floor_divide": (vg.floor_divide, (0.1, 0.9),
                                                                (1.0, 2.0)),
    "operators": (lambda x, y: (x + y) * (x - y) / (y * y + 1) ** y, (-1, 1), (0.2, 2)),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_gradients(name):
    fn, (lo, hi) = UNARY[name]
    rng = np.random.default_rng(0)
    for shape in ((), (3,), (2, 3)):
        verify_grad(fn, [rng.uniform(lo, hi, size=shape)], rng=rng)


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_gradients(name):
    fn, (lo_a, hi_a), (lo_b, hi_b) = BINARY[name]
    rng = np.random.default_rng(1)
    for shape_a, shape_b in (((), ()), ((3,), (3,)), ((2, 3), (3,)), ((2, 1), (1, 3)),
                             ((), (2, 3))):
        a, b = rng.uniform(lo_a, hi_a, size=shape_a), rng.uniform(lo_b, hi_b, size=shape_b)
        verify_grad(fn, [a, b], rng=rng)


@FEW
@given(shapes_=broadcastable_shapes(2, min_side=1, max_side=3),
       name=st.sampled_from(["add", "mul", "true_divide", "power", "sub"]), seed=seeds())
def test_broadcast_gradients_are_summed_back(shapes_, name, seed):
    fn, (lo_a, hi_a), (lo_b, hi_b) = BINARY[name]
    rng = np.random.default_rng(seed)
    a = rng.uniform(lo_a, hi_a, size=shapes_[0])
    b = rng.uniform(lo_b, hi_b, size=shapes_[1])
    verify_grad(fn, [a, b], rng=rng)


def test_where_and_clip_gradients():
    rng = np.random.default_rng(2)
    cond = vg.constant(np.array([True, False, True, False]))
    verify_grad(lambda x, y: vg.where(cond, x * x, vg.sin(y)),
                   [rng.uniform(-1, 1, 4), rng.uniform(-1, 1, (3, 4))], rng=rng)
    verify_grad(lambda x: vg.where(x > 0, x ** 3, -x), [np.array([-1.0, 0.5, 2.0, -0.3])])
    verify_grad(lambda x: vg.where(x > 0, x, 0.0), [np.array([-1.0, 0.5, 2.0])])
    verify_grad(lambda x: vg.clip(x, -1, 1), [np.array([-2.0, -0.5, 0.3, 1.7])])
    verify_grad(lambda x, lo: vg.clip(x, lo, 1.0), [np.array([-2.0, 0.5]), np.array(-1.0)])


def test_dimshuffle_gradients():
    rng = np.random.default_rng(3)
    p = rng.normal(size=(2, 1, 3))
    verify_grad(lambda x: x.T * vg.arange(2.0), [p])
    verify_grad(lambda x: vg.transpose(x, (1, 2, 0)) ** 2, [p])
    verify_grad(lambda x: vg.squeeze(x, 1) * vg.expand_dims(vg.squeeze(x, 1), 0), [p])
    verify_grad(lambda x: x.dimshuffle(2, "x", 0) ** 3, [p])


def test_repeated_use_accumulates():
    x = vg.scalar("x")
    g = vg.grad(x * x + vg.sin(x) + x, x)
    np.testing.assert_allclose(_ref([x], g)(0.7), 2 * 0.7 + np.cos(0.7) + 1)
    verify_grad(lambda v: v * vg.exp(v) * v, [np.array([0.3, -1.2])])


def test_run_time_broadcast_dimension_sums_back():
    """A None dimension that is 1 at run time broadcast against a longer one: its gradient is
    summed over that dimension (numpy semantics, decided at run time)."""
    a = vg.tensor("a", (None, None))
    b = vg.tensor("b", (None, 4))
    w = vg.tensor("w", (None, None))
    cost = vg.sum(a * b * w)
    ga, gb = vg.grad(cost, [a, b])
    assert ga.type.shape == (None, None) and gb.type.shape == (None, 4)
    f = _ref([a, b, w], [ga, gb])
    rng = np.random.default_rng(4)
    for sa, sb in (((1, 4), (3, 4)), ((3, 1), (3, 4)), ((1, 1), (1, 4)), ((3, 4), (1, 4)),
                   ((3, 4), (3, 4)), ((1, 4), (0, 4))):
        av, bv = rng.normal(size=sa), rng.normal(size=sb)
        wv = rng.normal(size=np.broadcast_shapes(sa, sb))
        got_a, got_b = f(av, bv, wv)
        prod_a = np.broadcast_to(bv * wv, wv.shape)
        prod_b = np.broadcast_to(av * wv, wv.shape)
        exp_a = prod_a.sum(axis=tuple(i for i in range(2) if sa[i] == 1 and wv.shape[i] != 1),
                           keepdims=True)
        exp_b = prod_b.sum(axis=tuple(i for i in range(2) if sb[i] == 1 and wv.shape[i] != 1),
                           keepdims=True)
        np.testing.assert_allclose(got_a, exp_a.reshape(sa))
        np.testing.assert_allclose(got_b, exp_b.reshape(sb))


def test_gradient_of_lower_ndim_input_sums_leading_axes():
    v = vg.tensor("v", (None,))
    m = vg.tensor("m", (None, None, None))
    g = vg.grad(vg.sum(v * m), v)
    mv = np.random.default_rng(5).normal(size=(2, 3, 4))
    np.testing.assert_allclose(_ref([v, m], g)(np.ones(4), mv), mv.sum(axis=(0, 1)))
    np.testing.assert_allclose(_ref([v, m], g)(np.ones(1), mv), [mv.sum()])


def test_float32_gradients_keep_dtype():
    x = vg.tensor("x", (None,), "float32")
    y = vg.tensor("y", (None,), "float32")
    cost = vg.sum(vg.maximum(x, y) * 2.0 + vg.where(x > 0, x, y) + vg.sigmoid(x) / y)
    gx, gy = vg.grad(cost, [x, y])
    assert gx.dtype == "float32" and gy.dtype == "float32"
    out = _ref([x, y], [gx, gy])(np.array([1.0, -1.0], "float32"), np.array([2.0, 3.0], "float32"))
    assert all(o.dtype == np.float32 for o in out)


def test_integer_inputs_get_zero_gradient():
    i = vg.tensor("i", (None,), "int32")
    x = vg.tensor("x", (None,), "float64")
    gi, gx = vg.grad(vg.sum(i * x + i.astype("float64") ** 2), [i, x])
    f = _ref([i, x], [gi, gx])
    got_i, got_x = f(np.array([1, 2, 3], "int32"), np.array([0.5, 1.0, 2.0]))
    np.testing.assert_array_equal(got_i, np.zeros(3))
    assert got_i.shape == (3,) and got_i.dtype.kind == "f"
    np.testing.assert_array_equal(got_x, [1, 2, 3])
    # also with disconnected="raise": an integer input is connected, its gradient is zero
    gi = vg.grad(vg.sum(i * x), i, disconnected="raise")
    np.testing.assert_array_equal(_ref([i, x], gi)(np.array([1, 2], "int32"), np.ones(2)), 0)


def test_disconnected_inputs():
    x, y = vg.tensor("x", (None, 2)), vg.tensor("y", (None,))
    cost = vg.sum(vg.exp(x))
    gy = vg.grad(cost, y)
    np.testing.assert_array_equal(_ref([x, y], gy)(np.ones((3, 2)), np.ones(5)), np.zeros(5))
    with pytest.raises(DisconnectedInputError, match="wrt\\[1\\]"):
        vg.grad(cost, [x, y], disconnected="raise")
    with pytest.raises(ValueError):  # DisconnectedInputError is a ValueError
        vg.grad(cost, y, disconnected="raise")
    with pytest.raises(ValueError, match="disconnected"):
        vg.grad(cost, x, disconnected="ignore")


def test_non_differentiable_path_is_zero_not_disconnected():
    x = vg.tensor("x", (None,))
    cost = vg.sum(vg.where(x > 0, 1.0, 0.0)) + vg.sum(vg.floor_divide(x, 2.0))
    g = vg.grad(cost, x, disconnected="raise")
    np.testing.assert_array_equal(_ref([x], g)(np.array([-1.0, 2.0])), [0.0, 0.0])


@pytest.mark.parametrize("fn", [vg.maximum, vg.minimum])
def test_maximum_minimum_ties_share_gradient(fn):
    x, y = vg.tensor("x", (None,)), vg.tensor("y", (None,))
    gx, gy = vg.grad(vg.sum(fn(x, y)), [x, y])
    f = _ref([x, y], [gx, gy])
    got_x, got_y = f(np.array([1.0, 2.0, 3.0]), np.array([1.0, 5.0, 0.0]))
    big_x = np.array([0.5, 0.0, 1.0]) if fn is vg.maximum else np.array([0.5, 1.0, 0.0])
    np.testing.assert_array_equal(got_x, big_x)
    np.testing.assert_array_equal(got_y, 1 - big_x)
    # the same variable on both sides: the halves add back up to 1
    g = vg.grad(vg.sum(fn(x, x)), x)
    np.testing.assert_array_equal(_ref([x], g)(np.array([1.0, -2.0])), [1.0, 1.0])


def test_grad_structure_and_errors():
    x, y = vg.scalar("x"), vg.tensor("y", (None,))
    cost = x * vg.sum(y)
    gx = vg.grad(cost, x)
    assert isinstance(gx, Variable)
    both = vg.grad(cost, [x, y])
    assert isinstance(both, list) and len(both) == 2
    assert isinstance(vg.grad(cost, (x,)), list)
    assert vg.grad(cost, []) == []
    gx2, gy2 = _ref([x, y], both)(2.0, np.array([1.0, 3.0]))
    assert gx2 == 4.0 and gx2.shape == ()
    np.testing.assert_array_equal(gy2, [2.0, 2.0])
    np.testing.assert_array_equal(_ref([x], vg.grad(x, x))(3.0), 1.0)  # d cost / d cost
    with pytest.raises(TypeError, match="scalar"):
        vg.grad(y * 2, y)
    with pytest.raises(TypeError, match="float"):
        vg.grad(vg.sum(vg.tensor("i", (None,), "int64")), x)
    with pytest.raises(TypeError):
        vg.grad(cost, [x, 3.0])


class _WrongGrad(Op):
    """x * 2 with a wrong gradient (3): verify_grad must notice."""

    def make_node(self, x):
        return Apply(self, [x], [x.type])

    def perform(self, node, inputs, outputs):
        outputs[0][0] = inputs[0] * 2

    def L_op(self, inputs, outputs, output_grads):
        return [output_grads[0] * 3]


def test_verify_grad_detects_a_wrong_gradient():
    with pytest.raises(GradientError):
        verify_grad(lambda x: _WrongGrad()(x), [np.array([1.0, 2.0])])


def test_the_pullback_of_a_loop_is_clean_when_built():
    """vg.grad through a scan builds a backward loop computing only what the requested
    gradients need (seed 003): asked for one gradient, the others' outputs are not there."""
    from verglas.graph.traversal import toposort
    from verglas.ops.scan import Scan

    x = vg.tensor("x", shape=(None, 3))
    h0, w, u = vg.tensor("h0", shape=(3,)), vg.tensor("w", shape=(3, 3)), vg.tensor(
        "u", shape=(3, 3))
    hs = vg.scan(lambda x_t, h: vg.tanh(h @ w + x_t @ u), sequences=x, outputs_info=h0)
    cost = vg.sum(hs**2)
    gw = vg.grad(cost, w)
    forward = {n for n in toposort([cost])}
    (backward,) = [n for n in toposort([gw]) if isinstance(n.op, Scan) and n not in forward]
    lay = backward.op.layout
    # the carry of h and w's running sum: no sums for u, no sequence gradients for x
    assert (lay.n_sit_sot, lay.n_nit_sot) == (2, 0), lay
    g = np.random.default_rng(0)
    values = [g.normal(size=(4, 3)), g.normal(size=3), g.normal(size=(3, 3)),
              g.normal(size=(3, 3))]
    f = vg.compile([x, h0, w, u], gw, mode="reference")
    verify_grad(lambda w_: vg.sum(vg.scan(lambda x_t, h: vg.tanh(h @ w_ + x_t @ values[3]),
                                          sequences=values[0],
                                          outputs_info=vg.constant(values[1]))**2),
                [values[2]])
    assert f(*values).shape == (3, 3)
