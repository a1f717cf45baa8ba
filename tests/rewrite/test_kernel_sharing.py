"""Composites that differ only in their constants become one op (rewrite/kernel_sharing.py)."""

import numpy as np

import verglas as vg
from verglas.graph import FunctionGraph
from verglas.ops.composite import Composite
from verglas.ops.elemwise import Elemwise
from verglas.graph.reference import ReferenceRunner
from verglas.rewrite import rewrite_graph


def _composites(fgraph):
    return [n.op for n in fgraph.toposort()
            if isinstance(n.op, Elemwise) and isinstance(n.op.scalar_op, Composite)]


def test_composites_differing_in_constants_become_one_op():
    x, y = vg.tensor("x", shape=(None,)), vg.tensor("y", shape=(None,))
    outs = [vg.exp(vg.sin(x + 1.0) * 2.0), vg.exp(vg.sin(y + 3.0) * 5.0)]
    fg = FunctionGraph([x, y], outs, clone=True)
    rewrite_graph(fg, "fast_run")
    ops = _composites(fg)
    assert len(ops) == 2 and ops[0] == ops[1]  # one op: the constants are inputs now
    g = fg.freeze()
    xv, yv = np.random.rand(5), np.random.rand(5)
    got = ReferenceRunner(g)([xv, yv])
    np.testing.assert_allclose(got[0], np.exp(np.sin(xv + 1.0) * 2.0))
    np.testing.assert_allclose(got[1], np.exp(np.sin(yv + 3.0) * 5.0))


def test_a_lone_composite_keeps_its_constants():
    x = vg.tensor("x", shape=(None,))
    fg = FunctionGraph([x], [vg.exp(vg.sin(x + 1.0) * 2.0)], clone=True)
    rewrite_graph(fg, "fast_run")
    (op,) = _composites(fg)
    assert len(op.scalar_op.fgraph.inputs) == 1  # constants still folded into the code


def test_shared_kernel_compiled_once_on_cpu():
    x = vg.tensor("x", shape=(None,))
    a = [vg.scalar(f"a{i}") for i in range(100)]
    y = sum(a[i] * vg.sin(x + i) for i in range(100))
    f = vg.compile([x, *a], y)
    src = f._runner.text
    names = [line.split("(")[0][4:] for line in src.splitlines() if line.startswith("def kern")]
    # defined once, called often (directly, or handed to the pool with its rows)
    assert names and any(src.count(f"({n}, ") + src.count(f"{n}, (") > 1 for n in names)
    xv = np.random.rand(7)
    av = [np.float64(i % 5) for i in range(100)]
    np.testing.assert_allclose(f(xv, *av), sum(av[i] * np.sin(xv + i) for i in range(100)))


def test_shared_kernel_serves_call_sites_of_different_static_shapes():
    # one SGD update expression applied to parameters of several static shapes
    shapes = [(3, 4), (4, 4), (5,), (2, 7), (7,)]
    ps = [vg.tensor(f"p{k}", shape=s, dtype="float32") for k, s in enumerate(shapes)]
    gs = [vg.tensor(f"g{k}", shape=s, dtype="float32") for k, s in enumerate(shapes)]
    f = vg.compile([*ps, *gs], [p - 0.05 * g for p, g in zip(ps, gs)])
    assert "def kern" in f._runner.text
    rng = np.random.default_rng(0)
    pv = [rng.standard_normal(s).astype("float32") for s in shapes]
    gv = [rng.standard_normal(s).astype("float32") for s in shapes]
    for got, p, g in zip(f(*pv, *gv), pv, gv):
        np.testing.assert_allclose(got, p - np.float32(0.05) * g, rtol=1e-6)
