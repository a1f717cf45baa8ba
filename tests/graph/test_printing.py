"""dprint: shared subtrees once, inner graphs once, nominal inputs as i0, inplace markers."""

import io

import pytest

from tests.graph.utils import (Inner, add, const, inplace_add, mul, scalar, sin, split, vector,
                               view)
from verglas.graph import FunctionGraph, dprint


def test_shared_subtree_prints_once():
    x = vector("x")
    s = sin(x)
    text = dprint(FunctionGraph([x], [add(s, mul(s, x))]), file="str")
    assert text == (
        "add [id A] 2\n"
        " ├─ sin [id B] 0\n"
        " │  └─ x [id C]\n"
        " └─ mul [id D] 1\n"
        "    ├─ sin [id B] 0\n"
        "    │  └─ ···\n"
        "    └─ x [id C]\n"
    )


def test_inner_graph_printed_once_with_nominal_inputs():
    a, b = scalar("a"), scalar("b")
    op1 = Inner.from_vars([a, b], [mul(sin(a), mul(b, b))])
    c, d = scalar("c"), scalar("d")
    op2 = Inner.from_vars([c, d], [mul(sin(c), mul(d, d))])
    x, y = scalar("x"), scalar("y")
    frozen = FunctionGraph([x, y], [op1(x, y), op2(y, x)]).freeze()
    text = dprint(frozen, file="str")
    assert text.count("Inner graphs:") == 1
    assert text.count(" ← mul") == 1  # one inner graph, printed once for both nodes
    assert "i0" in text and "i1" in text and "x" not in text
    head, inner = text.split("Inner graphs:")
    assert head.count("Inner{3 nodes}") == 2
    assert "    ├─ sin [id" in inner and "    │  └─ i0" in inner


def test_nested_inner_graphs_and_variables_list():
    a = scalar("a")
    inner = Inner.from_vars([a], [sin(a)])
    b = scalar("b")
    outer = Inner.from_vars([b], [inner(b)])
    x = scalar("x")
    text = dprint([outer(x), outer(x)], file="str")
    assert text.count(" ← ") == 2  # the outer op's graph, then the inner one
    assert text.index("← Inner") < text.index("← sin")


def test_markers_multi_outputs_and_constants():
    x = vector("x")
    a, b = split(view(x))
    out = inplace_add(a, const([1.0]))
    text = dprint(FunctionGraph([x], [out, b]), file="str")
    assert "add_inplace [id A] d={0: [0]}" in text
    assert "view [id" in text and "v={0: [0]}" in text
    assert "split.0 [id" in text and "split.1 [id" in text
    assert "[1.] [id" in text


def test_writes_to_file_and_accepts_objects_with_a_graph():
    x = vector("x")
    g = FunctionGraph([x], [sin(x)]).freeze()

    class Compiled:
        graph = g

    buf = io.StringIO()
    text = dprint(Compiled(), file=buf)
    assert buf.getvalue() == text == "sin [id A] 0\n └─ i0\n"
    assert dprint(sin(x), file="str") == "sin [id A]\n └─ x [id B]\n"
    assert dprint(sin(x).owner, file="str") == "sin [id A]\n └─ x [id B]\n"
    with pytest.raises(TypeError, match="cannot print"):
        dprint(3, file="str")


def test_deep_graph_prints_without_recursion():
    x = vector("x")
    v = x
    for _ in range(3000):
        v = sin(v)
    assert len(dprint(v, file="str").splitlines()) == 3001


def test_inner_graph_of_an_op_held_as_a_prop():
    from tests.graph.utils import Elemwise

    class Wrap(Elemwise):
        __props__ = ("name", "nin", "scalar_op")

        def __init__(self, scalar_op):
            super().__init__("wrap", 1)
            self.scalar_op = scalar_op

    a = scalar("a")
    op = Wrap(Inner.from_vars([a], [sin(a)]))
    text = dprint(op(scalar("x")), file="str")
    assert "Inner graphs:" in text and " ← sin" in text
