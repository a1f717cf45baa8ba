"""Specialization: cheaper special cases fire and keep results."""

from __future__ import annotations

import numpy as np
import pytest

import verglas as vg
from tests.rewrite.rules_util import check_preserved, op_names, rewritten, run_fg

DATA = np.array([0.0, -0.0, 1e-10, -1e-12, 0.5, -0.99, 3.0, np.inf, -np.inf, np.nan])


def _x(dtype="float64", shape=(None,)):
    return vg.tensor("x", shape=shape, dtype=dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_expm1_and_log1p(dtype):
    x = _x(dtype)
    data = DATA.astype(dtype)
    fg = check_preserved([x], [vg.exp(x) - 1, vg.log(1 + x), vg.log(x + 1)], [data],
                         rtol=1e-5, atol=1e-6)
    names = op_names(fg)
    assert names["expm1"] == 1 and names["log1p"] == 1
    assert "exp" not in names and "log" not in names and "add" not in names
    # and the specialized forms are more accurate near 0 than the originals:
    (got,) = run_fg(rewritten([x], vg.exp(x) - 1), [np.array([1e-10], dtype)])
    assert abs(float(got[0]) - 1e-10) < 1e-15


def test_expm1_not_for_other_constants():
    x = _x()
    fg = check_preserved([x], [vg.exp(x) - 2], [DATA])
    assert "expm1" not in op_names(fg)


def test_mul_self_neg_and_reciprocal():
    x = _x()
    fg = check_preserved([x], [x * x, x * -1, 1 / x], [DATA])
    names = op_names(fg)
    assert names["sqr"] == 1 and names["neg"] == 1 and names["reciprocal"] == 1
    assert "mul" not in names and "true_div" not in names


def test_unsigned_times_minus_one_is_not_negated():
    x = _x("uint8")
    data = np.array([0, 1, 200], "uint8")
    check_preserved([x], [x * vg.constant(np.uint8(255))], [data])


def test_reductions_over_nothing_or_length_one_axes():
    x = vg.tensor("x", shape=(None, 1, 3), dtype="int8")
    data = np.arange(-6, 6, dtype="int8").reshape(4, 1, 3)
    outs = [vg.sum(x, axis=1), vg.max(x, axis=(1, 2)), vg.sum(x, axis=1, keepdims=True),
            vg.any(x, axis=1), vg.prod(x, axis=()), vg.all(x, axis=(0, 1), keepdims=True)]
    fg = check_preserved([x], outs, [data])
    names = op_names(fg)
    assert names["Sum"] == 0 and names["Prod"] == 0 and names["Any"] == 0
    assert names["Max"] == 1 and names["All"] == 1
    for node in fg.apply_nodes:
        if type(node.op).__name__ == "Max":  # reduces the (n, 3) view: axis 1 was dropped
            assert node.inputs[0].type.shape == (None, 3) and node.op.axis == (1,)


def test_mean_becomes_sum_over_a_constant():
    """numpy divides the sum by the count: so do we, multiplying only by an exact reciprocal
    (a count that is a power of two)."""
    x = vg.tensor("x", shape=(4, 5))
    fg = check_preserved([x], [vg.mean(x, axis=1)], [np.arange(20.0).reshape(4, 5)])
    assert op_names(fg) == {"Sum": 1, "true_div": 1}
    fg = check_preserved([x], [vg.mean(x, axis=0)], [np.arange(20.0).reshape(4, 5)])
    assert op_names(fg) == {"Sum": 1, "mul": 1}


def test_sum_over_length_one_axes_adds_zero_only_where_minus_zero_can_arrive():
    """A float Sum over length-1 axes adds +0.0 (np.sum([-0.0]) is +0.0), except where its
    input already adds its terms to +0.0 (a MatMul)."""
    a = vg.tensor("a", shape=(None, 2))
    b = vg.tensor("b", shape=(2, 1))
    data = [np.array([[-1.0, -0.0], [-0.0, -0.0]]), np.array([[0.0], [-0.0]])]
    fg = check_preserved([a, b], [vg.sum(a @ b, axis=1)], data)
    assert "add" not in op_names(fg) and "Sum" not in op_names(fg)
    fg = check_preserved([a, b], [vg.sum(a[:, :1] * b[0], axis=1)], data)
    assert op_names(fg)["add"] == 1
    for got in run_fg(fg, data):
        assert not np.signbit(got[got == 0]).any()
