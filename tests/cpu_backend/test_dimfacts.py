"""Checks a generated function skips because earlier code proved them (dimfacts.py): the
union-find itself, and programs whose skipped checks would have caught nothing."""

from __future__ import annotations

import numpy as np
import pytest

import verglas as vg
from tests.cpu_backend.utils import compare_backend, compile_pair, expect_error, rng
from verglas.cpu_backend.dimfacts import DimFacts, tuple_items


def test_facts_join_and_keep_literals():
    facts = DimFacts({"k3": np.int64(1), "kf": np.float64(1.0)})
    facts.shape_is("b1", ["in0.shape[0]", "(in1.shape[1])"])
    facts.same_shape("b2", "b1", 2)
    assert facts.same("b2.shape[1]", "in1.shape[1]")
    assert not facts.same("b2.shape[0]", "b2.shape[1]")
    facts.learn("b2.shape[0]", "1")
    assert facts.same("in0.shape[0]", "k3")  # an integer global is its value
    assert not facts.same("kf", "1")  # (only integers)
    facts.learn("in1.shape[1]", "5")
    facts.learn("in1.shape[1]", "1")  # two literals are never merged
    assert not facts.same("1", "5")
    assert facts.unproven([("b1.shape[0]", "1"), ("a", "b"), ("b", "a")]) == [("a", "b")]


def test_tuple_items():
    assert tuple_items("(a.shape[0], f(x, y), )") == ["a.shape[0]", "f(x, y)"]
    assert tuple_items("(n,)") == ["n"] and tuple_items("()") == []
    assert tuple_items("(n)") is None and tuple_items("shp") is None


def _mlp_grad():
    x = vg.tensor("x", (None, 3), "float64")
    w1, b1 = vg.tensor("w1", (3, None), "float64"), vg.tensor("b1", (None,), "float64")
    w2 = vg.tensor("w2", (None, 2), "float64")
    y = vg.tensor("y", (None, 2), "float64")
    h = vg.tanh(x @ w1 + b1)
    loss = ((h @ w2 - y) ** 2).mean()
    return [x, w1, b1, w2, y], [loss, *vg.grad(loss, [w1, b1, w2])]


def test_a_gradient_checks_its_inputs_once():
    inputs, outputs = _mlp_grad()
    source = compile_pair(inputs, outputs)[0]._runner.text
    program = source[source.index("def program("):]
    # the forward pass checks its inputs; the backward pass's dims follow from them
    assert program.count("raise_if_") <= 5, program
    g = rng(4)
    arrays = [g.normal(size=(6, 3)), g.normal(size=(3, 4)), g.normal(size=4),
              g.normal(size=(4, 2)), g.normal(size=(6, 2))]
    compare_backend(inputs, outputs, arrays, rtol=1e-10, atol=1e-12)
    # broadcasting at run time (a bias of length 1, targets of one row) is still right
    compare_backend(inputs, outputs, [arrays[0], arrays[1], arrays[2][:1], arrays[3],
                                      arrays[4][:1]], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("bad, match", [(2, "Elemwise"), (3, "MatMul")])
def test_a_mismatch_is_still_caught_by_the_check_that_remains(bad, match):
    inputs, outputs = _mlp_grad()
    g = rng(5)
    arrays = [g.normal(size=(6, 3)), g.normal(size=(3, 4)), g.normal(size=4),
              g.normal(size=(4, 2)), g.normal(size=(6, 2))]
    arrays[bad] = g.normal(size=(5,) + arrays[bad].shape[1:])
    expect_error(inputs, outputs, arrays, ValueError, match)
