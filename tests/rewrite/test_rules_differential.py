"""Differential test of the whole rewrite pipeline: random graphs of elementwise ops (with
constants that trigger the algebra rules), broadcasting and reductions give the same results
(reference executor) before and after `rewrite_graph(fg, "fast_run")`, NaN and Inf included."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import verglas as vg
from tests.helpers import SETTINGS
from tests.rewrite.rules_util import assert_same, rewritten, run_fg, run_graph
from verglas.ops import math as m
from verglas.rewrite import get_mode

FLOAT_UNARY = {
    "neg": m.neg, "abs": m.abs, "sqr": m.sqr, "sqrt": m.sqrt, "tanh": m.tanh, "sin": m.sin,
    "log": m.log, "log1p": m.log1p, "identity": m.identity,
    # exp of a bounded value: log(exp(u)) still matches, and nothing overflows to inf where
    # the rewritten graph would (more accurately) stay finite
    "exp": lambda u: m.exp(m.tanh(u)), "expm1": lambda u: m.expm1(m.tanh(u)) + 0,
    "log_exp": lambda u: m.log(m.exp(m.tanh(u))), "exp_log": lambda u: m.exp(m.log(u)),
    "exp_log_abs": lambda u: m.exp(m.log(m.abs(u))), "exp_minus_1": lambda u: m.exp(m.tanh(u)) - 1,
    "log_1_plus": lambda u: m.log(1 + u), "pow2": lambda u: u ** 2, "pow_half": lambda u: u ** 0.5,
    "pow1": lambda u: u ** 1, "pow_m1": lambda u: (u * u + 1) ** -1, "double_neg": lambda u: -(-u),
    "pow3": lambda u: u ** 3, "pow5": lambda u: u ** 5, "pow1_5": lambda u: u ** 1.5,
    "cast_roundtrip": lambda u: m.cast(m.cast(u, "float64"), u.dtype),
}
INT_UNARY = {"neg": m.neg, "abs": m.abs, "sqr": m.sqr, "identity": m.identity,
             "pow3": lambda u: u ** 3,
             "double_neg": lambda u: -(-u), "minus_self": lambda u: u - u,
             "times_zero": lambda u: u * 0}
BINARY = {"add": m.add, "sub": m.sub, "mul": m.mul, "maximum": m.maximum, "minimum": m.minimum,
          "where": lambda a, b: m.where(m.gt(a, b), a, b), "where_same": lambda a, b: m.where(
              m.gt(a, b), a, a), "second": m.second}
# expm1 / log1p may flip the sign of a zero (see specialize.py): divide by nonzero values only
FLOAT_BINARY = {"div": lambda a, b: a / (m.abs(b) + 1)}
CONSTANTS = {"float64": [0.0, 1.0, 2.0, -1.0, 0.5, 3.0], "int64": [0, 1, 2, -1, 3]}


def _expr(data, leaves, dtype, depth):
    if depth == 0 or data.draw(st.integers(0, 3)) == 0:
        if data.draw(st.integers(0, 4)) == 0:
            return vg.constant(np.asarray(data.draw(st.sampled_from(CONSTANTS[dtype])), dtype))
        return data.draw(st.sampled_from(leaves))
    kind = data.draw(st.sampled_from(["unary", "binary", "binary", "const", "const",
                                      "reduce"]))
    a = _expr(data, leaves, dtype, depth - 1)
    if kind == "unary":
        table = FLOAT_UNARY if dtype == "float64" else INT_UNARY
        return table[data.draw(st.sampled_from(sorted(table)))](a)
    if kind == "const":
        c = data.draw(st.sampled_from(CONSTANTS[dtype]))
        op = data.draw(st.sampled_from(["add", "sub", "mul", "radd", "rmul"]
                                       + (["div"] if dtype == "float64" else [])))
        c = c if dtype == "float64" else int(c)
        return {"add": lambda: a + c, "sub": lambda: a - c, "mul": lambda: a * c,
                "radd": lambda: c + a, "rmul": lambda: c * a, "div": lambda: a / (c or 2.0)}[op]()
    if kind == "reduce":
        reduce = data.draw(st.sampled_from([vg.sum, vg.max, vg.min]))
        if a.ndim == 2 and data.draw(st.booleans()):
            return reduce(a, axis=data.draw(st.sampled_from([0, 1, (0, 1)])), keepdims=True)
        return reduce(a)  # a 0-d result broadcasts against anything
    b = _expr(data, leaves, dtype, depth - 1)
    table = dict(BINARY, **(FLOAT_BINARY if dtype == "float64" else {}))
    return table[data.draw(st.sampled_from(sorted(table)))](a, b)


def _values(dtype, shape, rng):
    if dtype == "int64":
        return rng.integers(-4, 5, shape).astype(dtype)
    pool = np.array([0.0, -0.0, 0.5, -1.5, 2.0, -2.0, 1.0, np.nan, np.inf, -np.inf])
    return rng.choice(pool, shape) if rng.random() < 0.5 else rng.uniform(-2, 2, shape)


@SETTINGS
@given(st.data(), st.sampled_from(["float64", "int64"]), st.integers(0, 2**32 - 1))
def test_pipeline_preserves_results(data, dtype, seed):
    x = vg.tensor("x", shape=(None, None), dtype=dtype)  # (4, 3) at run time
    y = vg.tensor("y", shape=(None, None), dtype=dtype)  # (4, 1): broadcasts at run time
    z = vg.tensor("z", shape=(1, 3), dtype=dtype)
    out = _expr(data, [x, y, z], dtype, depth=4)
    outs = [out, _expr(data, [x, y, z], dtype, depth=2)]
    rng = np.random.default_rng(seed)
    args = [_values(dtype, s, rng) for s in ((4, 3), (4, 1), (1, 3))]
    with np.errstate(all="ignore"):
        before = run_graph([x, y, z], outs, args)
        fg = rewritten([x, y, z], outs, get_mode("fast_run"))
        after = run_fg(fg, args)
    assert_same(before, after, rtol=1e-9, atol=1e-12)
