"""matmul and dot against numpy: 1-d promotion, batch broadcasting, dtypes, gradients."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import verglas as vg
from tests.helpers import (SETTINGS, compare_to_numpy, dtypes, layouts, random_array, seeds,
                           symbolic_shape, with_layout)
from tests.ops.shape_check import check_infer_shape
from verglas.ops.linalg import MatMul
from verglas.testing import verify_grad


@st.composite
def matmul_shapes(draw):
    """Shapes (a, b) numpy.matmul accepts: 1-d operands and broadcast batch dimensions."""
    n, k, m = (draw(st.integers(0, 4)) for _ in range(3))
    batch = draw(st.lists(st.integers(1, 3), max_size=2))
    a_nd, b_nd = draw(st.integers(1, 2 + len(batch))), draw(st.integers(1, 2 + len(batch)))

    def batch_for(nd):
        dims = batch[len(batch) - max(nd - 2, 0):] if nd > 2 else []
        return [d if draw(st.booleans()) else 1 for d in dims]

    a = (k,) if a_nd == 1 else tuple(batch_for(a_nd)) + (n, k)
    b = (k,) if b_nd == 1 else tuple(batch_for(b_nd)) + (k, m)
    return a, b


@SETTINGS
@given(matmul_shapes(), dtypes(), dtypes(), seeds(), layouts(), st.data())
def test_matmul(shapes_, da, db, seed, layout, data):
    sa, sb = shapes_
    rng = np.random.default_rng(seed)
    a = with_layout(random_array(rng, da, sa), layout)
    b = random_array(rng, db, sb)
    statics = [data.draw(symbolic_shape(sa)), data.draw(symbolic_shape(sb))]
    tol = 1e-4 if "float32" in (da, db) else None
    compare_to_numpy(vg.matmul, np.matmul, [a, b], static_shapes=statics, rtol=tol, atol=tol)
    compare_to_numpy(lambda x, y: x @ y, lambda x, y: x @ y, [a, b], rtol=tol, atol=tol)
    out = vg.matmul(vg.tensor("a", shape=sa, dtype=da), vg.tensor("b", shape=sb, dtype=db))
    expected = np.matmul(a, b)
    assert out.type.shape == expected.shape and out.dtype == expected.dtype.name


@pytest.mark.parametrize("sa,sb", [
    ((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)), ((2, 3), (3, 4)), ((5, 2, 3), (3,)),
    ((5, 2, 3), (3, 4)), ((2, 3), (4, 3, 2)), ((3,), (4, 3, 2)), ((2, 2, 3), (4, 1, 3, 2)),
    ((), (3,)), ((2, 3), ()),
])
def test_dot(sa, sb):
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=sa), rng.normal(size=sb)
    compare_to_numpy(vg.dot, np.dot, [a, b])
    compare_to_numpy(vg.dot, np.dot, [a, b], static_shapes=[sa, sb])


def test_dtype_promotion():
    for da, db in [("int32", "float32"), ("int64", "float32"), ("int32", "int64"),
                   ("bool", "bool"), ("float32", "float64"), ("bool", "int32")]:
        a, b = vg.tensor("a", shape=(2, 2), dtype=da), vg.tensor("b", shape=(2, 2), dtype=db)
        expected = np.matmul(np.ones((2, 2), da), np.ones((2, 2), db)).dtype.name
        assert vg.matmul(a, b).dtype == expected, (da, db)


def test_construction_errors():
    a, b = vg.tensor("a", shape=(2, 3)), vg.tensor("b", shape=(4, 5))
    with pytest.raises(ValueError, match=r"matmul: shapes \(2, 3\) and \(4, 5\).*3 != 4"):
        vg.matmul(a, b)
    with pytest.raises(ValueError, match=r"matmul: shapes \(2, 3\) and \(4,\)"):
        vg.matmul(a, vg.tensor("v", shape=(4,)))
    with pytest.raises(ValueError, match="matmul.*at least 1-d"):
        vg.matmul(a, vg.scalar("s"))
    with pytest.raises(ValueError, match=r"MatMul: batch.*\(2, 2, 3\).*\(3, 3, 1\)"):
        vg.matmul(vg.tensor("c", shape=(2, 2, 3)), vg.tensor("d", shape=(3, 3, 1)))
    with pytest.raises(ValueError, match=r"dot: shapes \(2, 3\) and \(2, 2, 5\)"):
        vg.dot(a, vg.tensor("e", shape=(2, 2, 5)))
    x, y = vg.tensor("x", shape=(None, None)), vg.tensor("y", shape=(None, None))
    f = vg.compile([x, y], x @ y, mode="reference")
    with pytest.raises(ValueError, match=r"MatMul: shapes \(2, 3\) and \(4, 5\)"):
        f(np.zeros((2, 3)), np.zeros((4, 5)))


def test_infer_shape_and_op():
    a, b = np.ones((2, 1, 3, 4)), np.ones((5, 4, 2))
    check_infer_shape(lambda x, y: x @ y, [a, b])
    check_infer_shape(lambda x, y: x @ y, [a, b],
                      static_shapes=[(2, 1, None, 4), (None,) * 3])
    check_infer_shape(lambda x, y: x @ y, [np.ones((1, 3, 4)), np.ones((6, 4, 2))])
    x = vg.tensor("x", shape=(None, 3))
    assert isinstance((x @ x.T).owner.op, MatMul)
    assert MatMul() == MatMul() and hash(MatMul()) == hash(MatMul())


# -- gradients ------------------------------------------------------------------------------------
RNG = np.random.default_rng(5)


@pytest.mark.parametrize("sa,sb", [
    ((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)), ((2, 3), (3, 4)),
    ((2, 1, 2, 3), (4, 3, 2)), ((1, 2, 3), (4, 3, 2)), ((3,), (2, 3, 2)), ((2, 2, 3), (3,)),
    ((2, 4, 3), (3, 2)), ((2, 3, 4, 3), (3, 2)), ((1, 0, 3), (3, 2)), ((2, 4, 0), (0, 2)),
])
def test_matmul_gradient(sa, sb):
    verify_grad(vg.matmul, [RNG.normal(size=sa), RNG.normal(size=sb)])


def test_dot_gradient_nd():
    verify_grad(vg.dot, [RNG.normal(size=(2, 3)), RNG.normal(size=(2, 3, 2))])


def test_mixed_dtype_gradient():
    a = vg.tensor("a", shape=(2, 3), dtype="float32")
    b = vg.tensor("b", shape=(3,), dtype="int32")
    ga = vg.grad(vg.sum(a @ b), a)
    assert ga.dtype == "float32"
    f = vg.compile([a, b], ga, mode="reference")
    got = f(np.ones((2, 3), "f4"), np.arange(3, dtype="int32"))
    np.testing.assert_allclose(got, np.broadcast_to(np.arange(3.0), (2, 3)))


def test_two_layer_mlp_loss_gradient():
    def loss(x, w1, b1, w2, b2):
        h = vg.tanh(x @ w1 + b1)
        out = h @ w2 + b2
        return vg.mean(vg.sqr(out - 1.0))

    shapes_ = [(5, 3), (3, 4), (4,), (4, 2), (2,)]
    verify_grad(loss, [RNG.normal(size=s) for s in shapes_])


def test_batched_rows_times_matrix_gradient_is_one_product():
    """d(a @ w)/dw for (..., M, K) `a` and 2-d `w`: one (K, rows) @ (rows, N) product of the
    flattened rows, no batch of products summed (a transformer's weight gradients)."""
    a = vg.tensor("a", shape=(None, None, None), dtype="float64")
    w = vg.tensor("w", shape=(None, None), dtype="float64")
    (gw,) = vg.grad(vg.sum(vg.tanh(a @ w)), [w])
    f = vg.compile([a, w], gw, mode="reference")
    products = [n for n in f.graph.toposort() if isinstance(n.op, MatMul)]
    assert products and all(n.outputs[0].ndim == 2 for n in products if n.inputs[0].ndim == 2)
    assert not any(type(n.op).__name__ == "Sum" and n.inputs[0].ndim == 3
                   and n.outputs[0].ndim == 2 for n in f.graph.toposort())
    x = RNG.normal(size=(3, 5, 4))
    verify_grad(lambda w_: vg.sum(vg.tanh(vg.constant(x[:, ::-1]) @ w_)),
                [RNG.normal(size=(4, 2))])
