"""Length arithmetic (rewrite/lengths.py), the shape rules that drop a second or a zeros-then-
increment, and what they buy: sizes the memory plan can match, and fewer buffers."""

from __future__ import annotations

import numpy as np
import pytest

import verglas as vg
from tests.rewrite.rules_util import check_preserved, op_names
from verglas.graph import FunctionGraph
from verglas.ops import math as m
from verglas.ops.basic import ShapeI
from verglas.rewrite import get_mode, rewrite_graph
from verglas.rewrite.lengths import lower_bound
from verglas.schedule.lower import lower


def _len(x, axis=0):
    return ShapeI(axis)(x)


def test_lower_bound_of_lengths():
    x = vg.tensor("x", shape=(None, 3), dtype="float64")
    n = _len(x)
    assert lower_bound(n) == 0
    assert lower_bound(_len(x, 1)) == 3
    assert lower_bound(n + 1) == 1
    assert lower_bound(n * _len(x, 1)) == 0
    assert lower_bound(m.maximum(n, 5)) == 5
    assert lower_bound(m.minimum(n + 2, 1)) == 1
    assert lower_bound(m.floor_divide(n + 7, 2)) == 3
    assert lower_bound(n - 1) is None  # sub is not bounded below
    k = vg.scalar("k", dtype="int64")
    assert lower_bound(k) is None and lower_bound(m.maximum(k, n)) == 0
    assert lower_bound(x) is None  # not an integer scalar


def _shape_graph(build):
    x = vg.tensor("x", shape=(None, None), dtype="float64")
    return x, build(x)


CASES = [
    # (name, expression of x's length, ops gone)
    ("max(len,0)", lambda x: m.maximum(_len(x), 0), {"maximum"}),
    ("max(0,len+1)", lambda x: m.maximum(0, _len(x) + 1), {"maximum"}),
    ("min(len+1,1)", lambda x: m.minimum(_len(x) + 1, 1), {"minimum"}),
    ("min(len,len+2)", lambda x: m.minimum(_len(x), _len(x) + 2), {"minimum"}),
    ("len<0", lambda x: m.where(m.lt(_len(x), 0), _len(x) * 2, _len(x)), {"lt", "switch"}),
    ("0>len", lambda x: m.where(m.gt(0, _len(x)), _len(x) * 2, _len(x)), {"gt", "switch"}),
    ("len>=0", lambda x: m.where(m.ge(_len(x), 0), _len(x), 7), {"ge", "switch"}),
    ("len//1", lambda x: m.floor_divide(_len(x), 1), {"floor_div"}),
    ("x[1:] rows", lambda x: _len(x[1:]), {"maximum", "minimum", "floor_div"}),
    ("x[:len] rows", lambda x: _len(x[:_len(x)]), {"maximum", "minimum", "floor_div"}),
]


@pytest.mark.parametrize("name,build,gone", CASES, ids=[c[0] for c in CASES])
def test_length_rule_fires_and_preserves(name, build, gone):
    x, out = _shape_graph(build)
    for rows in (0, 1, 5):
        fg = check_preserved([x], [out], [np.zeros((rows, 2))])
    assert not gone & set(op_names(fg)), op_names(fg)


@pytest.mark.parametrize("name,build", [
    ("max(len-3,0)", lambda x: m.maximum(_len(x) - 3, 0)),  # len - 3 may be negative
    ("min(k,1)", lambda x: m.minimum(vg.sum(x).astype("int64"), 1)),
    ("max(float,0)", lambda x: m.maximum(vg.sum(x), 0.0)),
], ids=lambda v: v if isinstance(v, str) else "")
def test_length_rule_keeps_what_it_cannot_prove(name, build):
    x, out = _shape_graph(build)
    fg = check_preserved([x], [out], [np.full((2, 2), -3.0)])
    assert {"maximum", "minimum"} & set(op_names(fg))


def test_second_dropped_where_another_operand_gives_its_shape():
    """ones_like(sqr(h)) * c * h -> c * h: sqr(h) is no longer computed for its shape."""
    h = vg.tensor("h", shape=(None, None), dtype="float64")
    c = vg.scalar("c", dtype="float64")
    out = m.second(h ** 2, c) * h
    fg = check_preserved([h, c], [out], [np.array([[1.0, -0.0], [np.nan, np.inf]]), np.array(3.0)])
    names = op_names(fg)
    assert "second" not in names and "sqr" not in names, names


def test_second_kept_where_it_broadcasts():
    h = vg.tensor("h", shape=(None, None), dtype="float64")
    v = vg.tensor("v", shape=(None,), dtype="float64")
    out = m.second(h, 2.0) * v  # v alone is a row: the second gives the result its rows
    fg = check_preserved([h, v], [out], [np.ones((3, 2)), np.arange(2.0)])
    assert "second" in op_names(fg)


@pytest.mark.parametrize("dtype,vdtype", [("float64", "float64"), ("float32", "float64"),
                                          ("int32", "int32")])
@pytest.mark.parametrize("setting", [False, True])
def test_increment_of_everything_is_elementwise(dtype, vdtype, setting):
    x = vg.tensor("x", shape=(None, None), dtype=dtype)
    n = _len(x)
    v = vg.exp(x.astype("float64")).astype(vdtype) if vdtype != dtype else x * 2
    update = vg.set_subtensor if setting else vg.inc_subtensor
    outs = [update(x[0:n], v), update(x[:, :_len(x, 1)], v), update(x[:], v[0])]
    fg = check_preserved([x], outs, [np.array([[1, -2], [3, 0]], dtype)])
    assert "IncSubtensor" not in op_names(fg)


def test_increment_of_part_is_kept():
    x = vg.tensor("x", shape=(None, None), dtype="float64")
    outs = [vg.inc_subtensor(x[1:], 1.0), vg.inc_subtensor(x[::2], 1.0),
            vg.inc_subtensor(x[: _len(x) - 1], 1.0)]
    fg = check_preserved([x], outs, [np.ones((3, 2))])
    assert op_names(fg)["IncSubtensor"] == 3


def test_rnn_gradient_sizes_match_and_memory_shrinks():
    """The RNN loss gradient of the suite: the input's gradient is the backward trace itself
    (no zeros and no increment: scan_grad knows the sequence is as long as the loop), x @ u's
    storage is reused by a backward trace (both sizes are now `x.shape[0] * u.shape[1]`), and
    the loss no longer keeps sqr(h) for its shape."""
    names = ("h0", "x", "w", "u", "b")
    h0, x, w, u, b = (vg.tensor(n, shape=(None,) * d, dtype="float64")
                      for n, d in zip(names, (1, 2, 2, 2, 1)))
    hs = vg.scan(lambda x_t, h: vg.tanh(h @ w + x_t @ u + b), sequences=x, outputs_info=h0)
    loss = vg.mean(hs ** 2)
    outs = [loss, *vg.grad(loss, [h0, x, w])]
    fg = rewrite_graph(FunctionGraph([h0, x, w, u, b], outs, clone=True), get_mode("fast_run"))
    program = lower(fg.freeze())
    text = str(program)
    assert "IncSubtensor" not in text
    # sqr(h) is read by the loss's sum alone: computed in its loop, no storage
    assert all("@s" not in line for line in text.splitlines() if "Elemwise{sqr}" in line)
    T, H = 1000, 64
    trace = T * H * 8
    # hs, x @ u (then one backward trace), 1-2 more traces: under 5 of them, was 7
    assert program.peak_bytes([(H,), (T, H), (H, H), (H, H), (H,)]) < 5 * trace + 4 * H * H * 8
    rng = np.random.default_rng(1)
    args = [rng.standard_normal(4) * 0.1, rng.standard_normal((3, 4)),
            rng.standard_normal((4, 4)) / 4, rng.standard_normal((4, 4)) / 4,
            rng.standard_normal(4) * 0.1]
    f = vg.compile([h0, x, w, u, b], outs, mode="reference")
    got = f(*args)
    step = 1e-6
    for k, wrt in ((1, 0), (2, 1), (3, 2)):  # finite differences of the loss
        base = args[wrt]
        for idx in [(0,) * base.ndim, tuple(s - 1 for s in base.shape)]:
            plus, minus = [a.copy() for a in args], [a.copy() for a in args]
            plus[wrt][idx] += step
            minus[wrt][idx] -= step
            numeric = (f(*plus)[0] - f(*minus)[0]) / (2 * step)
            np.testing.assert_allclose(got[k][idx], numeric, rtol=1e-5, atol=1e-8)
