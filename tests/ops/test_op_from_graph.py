"""OpFromGraph: a frozen, reusable subgraph as one op."""

import pickle

import cloudpickle
import numpy as np
import pytest

import verglas as vg
from verglas.graph import FunctionGraph
from verglas.ops.op_from_graph import OpFromGraph, inline_ofg, infer_shapes
from verglas.testing import verify_grad


def _axpy():
    """A fresh graph for a * x + y, built from new variables every call."""
    a, x, y = vg.scalar("a"), vg.tensor("x", shape=(None,)), vg.tensor("y", shape=(None,))
    return OpFromGraph([a, x, y], [a * x + y, vg.exp(x)])


def _run(inputs, outputs, *values):
    return vg.compile(inputs, outputs, mode="reference")(*values)


def test_equality_of_structurally_identical_graphs():
    op1, op2 = _axpy(), _axpy()
    assert op1 == op2 and hash(op1) == hash(op2)
    # interning: the two inner graphs are made of the very same objects
    assert op1.fgraph.outputs[0] is op2.fgraph.outputs[0]
    assert op1.fgraph.toposort() == op2.fgraph.toposort()
    a, x = vg.scalar("a"), vg.tensor("x", shape=(None,))
    assert OpFromGraph([a, x], [a * x]) != OpFromGraph([a, x], [a + x])
    assert OpFromGraph([a, x], [a * x]) != OpFromGraph([x, a], [a * x])


def test_inline_flag_is_part_of_equality():
    a, x = vg.scalar("a"), vg.tensor("x", shape=(None,))
    plain, inlined = OpFromGraph([a, x], [a * x]), OpFromGraph([a, x], [a * x], inline=True)
    assert plain != inlined
    assert plain.replace(inline=True) == inlined
    assert plain.replace(inline=False) is plain
    assert plain.clone() is plain


def test_call_against_numpy():
    op = _axpy()
    a, x, y = vg.scalar("a"), vg.tensor("x", shape=(None,)), vg.tensor("y", shape=(None,))
    out, ex = op(a, x, y)
    av, xv, yv = 2.0, np.arange(4.0), np.ones(4)
    got_out, got_ex = _run([a, x, y], [out, ex], av, xv, yv)
    np.testing.assert_allclose(got_out, av * xv + yv)
    np.testing.assert_allclose(got_ex, np.exp(xv))


def test_used_twice_in_one_graph():
    a, x = vg.scalar("a"), vg.tensor("x", shape=(None,))
    op = OpFromGraph([a, x], [vg.sin(x) * a])
    u, v = vg.tensor("u", shape=(None,)), vg.tensor("v", shape=(None,))
    z = op(2.0, u) + op(3.0, op(1.0, v))
    uv, vv = np.linspace(0, 1, 5), np.linspace(1, 2, 5)
    np.testing.assert_allclose(_run([u, v], z, uv, vv),
                               2 * np.sin(uv) + 3 * np.sin(np.sin(vv)))
    f = vg.compile([u, v], z, mode="reference")
    ops = {n.op for n in f.graph.toposort() if isinstance(n.op, OpFromGraph)}
    assert len(ops) == 1  # one op, three applications


def test_nested_ofg():
    x = vg.tensor("x", shape=(None,))
    inner = OpFromGraph([x], [x * x])
    y = vg.tensor("y", shape=(None,))
    outer = OpFromGraph([y], [inner(y) + inner(y + 1.0)])
    z = vg.tensor("z", shape=(None,))
    zv = np.arange(3.0)
    np.testing.assert_allclose(_run([z], outer(z), zv), zv ** 2 + (zv + 1) ** 2)
    verify_grad(lambda p: outer(p), [zv])
    # the nested op is equal when rebuilt from scratch
    x2, y2 = vg.tensor("x2", shape=(None,)), vg.tensor("y2", shape=(None,))
    inner2 = OpFromGraph([x2], [x2 * x2])
    assert OpFromGraph([y2], [inner2(y2) + inner2(y2 + 1.0)]) == outer


def test_make_node_checks_inputs():
    op = _axpy()
    x = vg.tensor("x", shape=(None,))
    with pytest.raises(TypeError, match="OpFromGraph.*expected 3 inputs"):
        op(x, x)
    with pytest.raises(TypeError, match="OpFromGraph.*input 1"):
        op(1.0, vg.tensor("m", shape=(None, None)), x)
    with pytest.raises(TypeError, match="OpFromGraph.*input 1"):
        op(1.0, vg.tensor("i", shape=(None,), dtype="float32"), x)
    # a more specific static shape is accepted, Python scalars become constants
    out, _ = op(2, vg.tensor("s", shape=(3,)), x)
    assert out.type.shape == (None,)


def test_pickle_op_and_function():
    op = _axpy()
    for dumps, loads in ((pickle.dumps, pickle.loads), (cloudpickle.dumps, cloudpickle.loads)):
        again = loads(dumps(op))
        assert again == op and hash(again) == hash(op)
        assert again.fgraph.outputs[0] is op.fgraph.outputs[0]
    a, x, y = vg.scalar("a"), vg.tensor("x", shape=(None,)), vg.tensor("y", shape=(None,))
    f = vg.compile([a, x, y], op(a, x, y)[0] * 2, mode="reference")
    f(1.0, np.ones(2), np.ones(2))  # builds the cached runner, which must not be pickled
    g = cloudpickle.loads(cloudpickle.dumps(f))
    np.testing.assert_allclose(g(2.0, np.arange(3.0), np.ones(3)), 2 * (2 * np.arange(3) + 1))
    assert pickle.loads(pickle.dumps(f))(1.0, np.ones(2), np.ones(2)).tolist() == [4.0, 4.0]


def test_gradient_is_an_ofg_computed_once():
    op = _axpy()
    a, x, y = vg.scalar("a"), vg.tensor("x", shape=(None,)), vg.tensor("y", shape=(None,))
    out, ex = op(a, x, y)
    ga, gx, gy = vg.grad(vg.sum(out * 3.0 + ex), [a, x, y])
    grad_op = gx.owner.op
    assert isinstance(grad_op, OpFromGraph)
    # a second use reuses the cached gradient op
    gx2 = vg.grad(vg.sum(op(a, y, x)[0]), x)
    assert gx2.owner.op is grad_op or gx2.owner.op == grad_op
    av, xv, yv = 0.5, np.linspace(-1, 2, 4), np.arange(4.0)
    got = _run([a, x, y], [ga, gx, gy], av, xv, yv)
    np.testing.assert_allclose(got[0], 3 * xv.sum())
    np.testing.assert_allclose(got[1], 3 * av + np.exp(xv))
    np.testing.assert_allclose(got[2], np.full(4, 3.0))


def test_verify_grad():
    op = _axpy()
    rng = np.random.default_rng(1)
    verify_grad(lambda a, x, y: op(a, x, y)[0] * op(a, y, x)[1],
                   [np.array(0.7), rng.normal(size=3), rng.normal(size=3)])


def test_integer_inputs_have_no_gradient():
    x, k = vg.tensor("x", shape=(None,)), vg.scalar("k", dtype="int64")
    op = OpFromGraph([x, k], [x * k])
    u = vg.tensor("u", shape=(None,))
    g = vg.grad(vg.sum(op(u, 3)), u)
    np.testing.assert_allclose(_run([u], g, np.ones(2)), [3.0, 3.0])
    assert op.connection_pattern == ((True,), (True,))


def test_inline_ofg_rebuilds_on_outer_variables():
    op = _axpy()
    a, x, y = vg.scalar("a"), vg.tensor("x", shape=(None,)), vg.tensor("y", shape=(None,))
    out, ex = inline_ofg(op, [a, x, y])
    assert not any(isinstance(n.op, OpFromGraph) for n in FunctionGraph([a, x, y],
                                                                        [out]).toposort())
    np.testing.assert_allclose(_run([a, x, y], out, 2.0, np.ones(2), np.ones(2)), [3.0, 3.0])
    # inlining the same op twice builds the same frozen graph as applying it
    f1 = vg.compile([a, x, y], [out, ex], mode="reference").graph
    f2 = vg.compile([a, x, y], list(inline_ofg(op, [a, x, y])), mode="reference").graph
    assert f1 == f2


def test_infer_shape():
    x = vg.tensor("x", shape=(None, None))
    op = OpFromGraph([x], [vg.transpose(x) * 2.0, x.sum(axis=0)])
    m = vg.tensor("m", shape=(None, None))
    outs = op(m)
    shapes = op.infer_shape(None, outs[0].owner, [(vg.as_tensor(2), vg.as_tensor(5))])
    f = vg.compile([m], [s for shp in shapes for s in shp], mode="reference")
    assert [int(v) for v in f(np.zeros((1, 1)))] == [5, 2, 5]
    (shp,) = infer_shapes([outs[1]], {m: (vg.as_tensor(7), vg.as_tensor(3))})
    assert int(vg.compile([m], shp[0], mode="reference")(np.zeros((1, 1)))) == 3


def test_perform_outputs_do_not_alias_inputs():
    x = vg.tensor("x", shape=(None,))
    op = OpFromGraph([x], [x, x])
    u = vg.tensor("u", shape=(None,))
    node = op(u)[0].owner
    storage = [[None], [None]]
    xv = np.arange(3.0)
    op.perform(node, [xv], storage)
    assert not np.may_share_memory(storage[0][0], xv)
    assert not np.may_share_memory(storage[0][0], storage[1][0])
