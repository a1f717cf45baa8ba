"""check_graph catches broken invariants; traversal utilities."""

import pytest

from tests.graph.utils import add, const, exp, mul, neg, sin, vector
from verglas.graph import (FrozenFunctionGraph, FunctionGraph, SpecError, TensorType, Variable,
                           ancestors, check_graph, clone, freeze, graph_replace,
                           toposort)
from verglas.graph.frozen import FrozenApply


def graph():
    x, y = vector("x"), vector("y")
    return FunctionGraph([x, y], [mul(sin(x), add(x, y))])


class TestSpec:
    def test_valid_graphs_pass(self):
        fg = graph()
        check_graph(fg)
        check_graph(fg.freeze())
        check_graph(fg.freeze(dedup_nodes=False))

    def test_inconsistent_clients(self):
        fg = graph()
        x = fg.inputs[0]
        fg.clients[x].append(fg.clients[x][0])
        with pytest.raises(SpecError, match="clients of x"):
            check_graph(fg)

    def test_node_input_changed_behind_the_graphs_back(self):
        fg = graph()
        node = fg.outputs[0].owner
        node.inputs[0] = fg.inputs[1]
        with pytest.raises(SpecError, match="clients"):
            check_graph(fg)

    def test_orphan_and_foreign_owner(self):
        fg = graph()
        stray = vector("stray")
        fg.variables.add(stray)
        fg.clients[stray] = []
        with pytest.raises(SpecError, match="orphan stray"):
            check_graph(fg)
        fg = graph()
        foreign = exp(fg.inputs[0])
        fg.variables.add(foreign)
        fg.clients[foreign] = []
        with pytest.raises(SpecError, match="not in apply_nodes"):
            check_graph(fg)

    def test_dead_node_and_unreachable_output(self):
        fg = graph()
        dead = neg(fg.inputs[0]).owner
        fg.apply_nodes.add(dead)
        fg.variables.update(dead.outputs)
        fg.clients[dead.outputs[0]] = []
        fg.clients[fg.inputs[0]].append((dead, 0))
        with pytest.raises(SpecError, match="do not reach"):
            check_graph(fg)
        fg = graph()
        fg.outputs.append(vector("ghost"))
        with pytest.raises(SpecError, match="ghost"):
            check_graph(fg)

    def test_output_type_must_be_a_type(self):
        fg = graph()
        node = fg.outputs[0].owner
        node.outputs[0].type = "float64"
        with pytest.raises(SpecError, match="not a Type"):
            check_graph(fg)

    def test_frozen_out_of_order_and_not_interned(self):
        g = graph().freeze()
        nodes = g.toposort()
        bad = FrozenFunctionGraph._new(g.inputs, g.outputs, nodes[::-1], True)
        with pytest.raises(SpecError, match="later"):
            check_graph(bad)
        # a FrozenApply built outside intern_node
        rogue = object.__new__(FrozenApply)
        for name, value in (("op", sin), ("inputs", (g.inputs[0],)), ("position", None)):
            FrozenApply.__dict__[name].__set__(rogue, value)
        FrozenApply.__dict__["outputs"].__set__(rogue, (Variable(g.inputs[0].type, rogue, 0),))
        bad = FrozenFunctionGraph._new(g.inputs, rogue.outputs, (rogue,), True)
        with pytest.raises(SpecError, match="not the interned node"):
            check_graph(bad)

    def test_frozen_reads_a_non_interned_constant(self):
        x = vector("x")
        g = FunctionGraph([x], [add(x, const([5.0]))]).freeze()
        stray = const([5.0])
        bad = FrozenFunctionGraph._new(g.inputs, (stray,), (), True)
        with pytest.raises(SpecError, match="not the interned constant"):
            check_graph(bad)

    def test_not_a_graph(self):
        with pytest.raises(TypeError):
            check_graph([1, 2])


class TestTraversal:
    def test_ancestors_and_toposort(self):
        x, y = vector("x"), vector("y")
        s = sin(x)
        out = mul(s, add(s, y))
        assert set(ancestors([out])) == {out, s, x, y, out.owner.inputs[1]}
        assert set(ancestors([out], blockers=[s])) == {out, s, y, out.owner.inputs[1]}
        order = toposort([out])
        assert order == [s.owner, out.owner.inputs[1].owner, out.owner]
        assert toposort([out], [s]) == order[1:]

    def test_toposort_detects_cycles(self):
        x = vector("x")
        a = sin(x)
        b = exp(a)
        a.owner.inputs[0] = b
        with pytest.raises(ValueError, match="cycle"):
            toposort([b])
        with pytest.raises(ValueError, match="cycle"):
            freeze([x], [b])

    def test_deep_toposort(self):
        x = vector("x")
        v = x
        for _ in range(20000):
            v = sin(v)
        assert len(toposort([v])) == 20000

    def test_clone(self):
        x, y = vector("x"), vector("y")
        c = const([1.0])
        out = add(sin(x), add(y, c))
        (x2, y2), (out2,), memo = clone([x, y], [out])
        assert x2 is not x and x2.name == "x" and out2 is not out
        assert toposort([out2])[-1].inputs[1].owner.inputs[1] is c  # constants are shared
        assert FunctionGraph([x2, y2], [out2]).freeze() == FunctionGraph([x, y], [out]).freeze()

    def test_clone_and_replace_never_truth_test_variables(self):
        # The array language's variables refuse bool(); traversal must not rely on it.
        class Strict(Variable):
            __slots__ = ()

            def __bool__(self):
                raise TypeError("symbolic")

        class StrictType(TensorType):
            __slots__ = ()
            variable_class = Strict

        x = StrictType("float64", (None,)).make_variable("x")
        out = sin(sin(x))
        _, (out2,), _ = clone([x], [out])
        assert isinstance(out2, Variable) and out2 is not out
        y = StrictType("float64", (None,)).make_variable("y")
        (new,) = graph_replace([out], {x: y})
        assert toposort([new])[0].inputs[0] is y

    def test_graph_replace(self):
        x, y = vector("x"), vector("y")
        s = sin(x)
        out = mul(s, y)
        (new,) = graph_replace([out], {s: neg(y)})
        assert new is not out and str(new.owner.inputs[0].owner.op) == "neg"
        assert out.owner.inputs[0] is s  # the original graph is untouched
        (same,) = graph_replace([out], {})
        assert same is out
        with pytest.raises(TypeError, match="cannot replace"):
            graph_replace([out], {s: TensorType("float32", (None,)).make_variable()})
