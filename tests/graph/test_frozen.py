"""FrozenFunctionGraph: interning, equality, constants, dedup, unfreeze, pickling, fingerprint."""

import gc
import os
import pickle
import subprocess
import sys
from pathlib import Path

import cloudpickle
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.graph.utils import (Inner, add, build_random_graph, const, exp, mul, neg, scalar, sin,
                               split, vector)
from verglas.graph import (Apply, FrozenApply, FrozenFunctionGraph, FunctionGraph,
                           MissingInputError, NominalVariable, check_graph, freeze,
                           intern_constant, intern_table_sizes, nominal_input)

ROOT = Path(__file__).resolve().parents[2]
PICKLERS = [pytest.param(pickle, id="pickle"), pytest.param(cloudpickle, id="cloudpickle")]


def seed_001(names="ab"):
    """sin(a) * b**2 (b**2 as b*b) over fresh variables: the seed-001 example."""
    a, b = scalar(names[0]), scalar(names[1])
    return FunctionGraph([a, b], [mul(sin(a), mul(b, b))])


def same_objects(g1: FrozenFunctionGraph, g2: FrozenFunctionGraph) -> bool:
    """Whether two frozen graphs are made of the very same interned objects."""
    return (all(a is b for a, b in zip(g1.inputs, g2.inputs, strict=True))
            and all(a is b for a, b in zip(g1.outputs, g2.outputs, strict=True))
            and all(a is b for a, b in zip(g1.toposort(), g2.toposort(), strict=True)))


class TestFreeze:
    def test_seed_001_graphs_freeze_equal(self):
        g1, g2 = seed_001("ab").freeze(), seed_001("cd").freeze()
        assert g1 == g2 and hash(g1) == hash(g2)
        assert g1.outputs[0] is g2.outputs[0]
        assert same_objects(g1, g2)
        assert {g1: "value"}[g2] == "value"
        check_graph(g1)

    def test_different_graphs_differ(self):
        a, b = scalar("a"), scalar("b")
        g = seed_001().freeze()
        assert g != FunctionGraph([a, b], [mul(sin(b), mul(a, a))]).freeze()
        assert g != FunctionGraph([a, b], [add(sin(a), mul(b, b))]).freeze()
        # input order is part of a graph's identity
        assert g != FunctionGraph([b, a], [mul(sin(a), mul(b, b))]).freeze()
        assert g != "not a graph"

    def test_nominal_inputs(self):
        g = seed_001().freeze()
        i0, i1 = g.inputs
        assert isinstance(i0, NominalVariable) and (i0.position, i1.position) == (0, 1)
        assert i0 is nominal_input(0, scalar().type)
        assert repr(i0) == "i0" and i0.clone() is i0
        assert nominal_input(0, vector().type) is not i0

    def test_frozen_nodes_are_immutable(self):
        g = seed_001().freeze()
        node = g.outputs[0].owner
        assert isinstance(node, FrozenApply) and node.frozen
        assert type(node.inputs) is tuple and type(node.outputs) is tuple
        assert type(g.inputs) is tuple and type(g.outputs) is tuple
        assert type(g.toposort()) is tuple
        with pytest.raises(TypeError):
            node.inputs[0] = g.inputs[0]
        with pytest.raises(AttributeError):
            node.op = add
        with pytest.raises(AttributeError):
            node.inputs = ()
        with pytest.raises(AttributeError):
            g.outputs = ()
        with pytest.raises(TypeError):
            g.outputs[0] = g.inputs[0]

    def test_outputs_that_are_inputs_or_constants(self):
        x = vector("x")
        c = const([1.0, 2.0])
        g = FunctionGraph([x], [x, c, sin(x)]).freeze()
        assert g.outputs[0] is g.inputs[0]
        assert g.outputs[1] is intern_constant(const([1.0, 2.0]))
        check_graph(g)

    def test_missing_input(self):
        x, hidden = vector("x"), vector("hidden")
        with pytest.raises(MissingInputError, match="hidden"):
            freeze([x], [add(x, hidden)])

    def test_multi_output_nodes(self):
        x = vector("x")
        a, b = split(x)
        g = FunctionGraph([x], [add(a, b), b]).freeze()
        (node,) = [n for n in g.toposort() if str(n.op) == "split"]
        assert g.outputs[1] is node.outputs[1]
        y = vector("y")
        a2, b2 = split(y)
        assert FunctionGraph([y], [add(a2, b2), b2]).freeze() == g
        check_graph(g)

    def test_merges_common_subexpressions(self):
        x = vector("x")
        g = FunctionGraph([x], [add(sin(x), sin(x))]).freeze()
        assert len(g.toposort()) == 2
        node = g.outputs[0].owner
        assert node.inputs[0] is node.inputs[1]


class TestConstants:
    def test_interned_by_type_and_value(self):
        assert intern_constant(const([1.0, 2.0])) is intern_constant(const([1.0, 2.0]))
        assert intern_constant(const(1.0)) is not intern_constant(const(2.0))

    def test_nan_equals_nan(self):
        assert intern_constant(const(np.nan)) is intern_constant(const(np.nan))
        x, y = scalar("x"), scalar("y")
        assert freeze([x], [add(x, const(np.nan))]) == freeze([y], [add(y, const(np.nan))])

    def test_signed_zeros_differ(self):
        assert intern_constant(const(0.0)) is not intern_constant(const(-0.0))
        x = scalar("x")
        assert freeze([x], [add(x, const(0.0))]) != freeze([x], [add(x, const(-0.0))])

    def test_dtype_matters(self):
        assert intern_constant(const(1, "float32")) is not intern_constant(const(1, "float64"))
        assert intern_constant(const(1, "int64")) is not intern_constant(const(1, "float64"))

    def test_shape_matters(self):
        assert intern_constant(const([1.0])) is not intern_constant(const(1.0))

    def test_freeze_uses_the_canonical_constant(self):
        x = scalar("x")
        g1 = freeze([x], [add(x, const(3.0))])
        g2 = freeze([x], [add(x, const(3.0))])
        assert g1 == g2 and g1.constants() == g2.constants()
        assert g1.constants()[0] is intern_constant(const(3.0))


class TestDedup:
    def twins(self):
        x = vector("x")
        return FunctionGraph([x], [add(sin(x), sin(x))])

    def test_dedup_false_keeps_twins_distinct(self):
        g = self.twins().freeze(dedup_nodes=False)
        assert len(g.toposort()) == 3
        node = g.outputs[0].owner
        assert node.inputs[0] is not node.inputs[1]
        assert node.inputs[0].owner.op == node.inputs[1].owner.op
        check_graph(g)

    def test_dedup_false_structurally_identical_graphs_equal(self):
        g1 = self.twins().freeze(dedup_nodes=False)
        g2 = self.twins().freeze(dedup_nodes=False)
        assert g1 == g2 and hash(g1) == hash(g2) and same_objects(g1, g2)
        assert g1 != self.twins().freeze(dedup_nodes=True)
        assert g1.fingerprint() != self.twins().freeze().fingerprint()


class TestUnfreeze:
    def test_unfreeze_returns_a_fresh_function_graph(self):
        g = seed_001().freeze()
        fg = g.unfreeze()
        assert type(fg) is FunctionGraph
        assert not any(isinstance(n, FrozenApply) for n in fg.apply_nodes)
        assert not any(isinstance(v, NominalVariable) for v in fg.inputs)
        assert fg.freeze() == g
        assert g.unfreeze().outputs[0] is not fg.outputs[0]
        check_graph(fg)

    def test_mutating_the_unfrozen_graph_leaves_the_frozen_one(self):
        g = seed_001().freeze()
        fg = g.unfreeze()
        fg.replace(fg.outputs[0], neg(fg.outputs[0]))
        assert fg.freeze() != g
        assert str(g.outputs[0].owner.op) == "mul"
        check_graph(g)

    def test_unfreeze_dedup_false(self):
        x = vector("x")
        g = FunctionGraph([x], [add(sin(x), sin(x))]).freeze(dedup_nodes=False)
        assert g.unfreeze().freeze(dedup_nodes=False) == g


class TestPickle:
    @pytest.mark.parametrize("module", PICKLERS)
    def test_round_trip_gives_the_same_objects(self, module):
        g = seed_001().freeze()
        g2 = module.loads(module.dumps(g))
        assert g2 == g and same_objects(g, g2)

    @pytest.mark.parametrize("module", PICKLERS)
    def test_round_trip_with_constants_and_dedup_false(self, module):
        x = vector("x")
        c = const([1.0, np.nan])
        g = FunctionGraph([x], [add(sin(x), sin(x)), c, add(x, c)]).freeze(dedup_nodes=False)
        g2 = module.loads(module.dumps(g))
        assert g2 == g and same_objects(g, g2) and g2.dedup_nodes is False

    @pytest.mark.parametrize("module", PICKLERS)
    def test_nested_inner_graph(self, module):
        inner = Inner.from_vars(*_seed_vars())
        a, b = scalar("a"), scalar("b")
        outer = FunctionGraph([a, b], [exp(inner(sin(a), b))]).freeze()
        outer2 = module.loads(module.dumps(outer))
        assert outer2 == outer and same_objects(outer, outer2)
        # the op itself unpickles to an equal op whose frozen graph is the canonical one
        inner2 = module.loads(module.dumps(inner))
        assert inner2 == inner and hash(inner2) == hash(inner)
        assert same_objects(inner2.fgraph, inner.fgraph)
        check_graph(outer2)

    @pytest.mark.parametrize("module", PICKLERS)
    def test_frozen_variable_with_constant_ancestor(self, module):
        x = vector("x")
        g = FunctionGraph([x], [sin(add(x, const([2.0])))]).freeze()
        out = module.loads(module.dumps(g.outputs[0]))
        assert out is g.outputs[0]

    def test_unpickle_after_the_original_was_freed(self):
        data = pickle.dumps(seed_001().freeze())
        gc.collect()
        g = pickle.loads(data)
        assert g == seed_001().freeze()
        check_graph(g)

    def test_deep_graph_pickles_flat(self):
        x = vector("x")
        v = x
        for _ in range(5000):
            v = sin(v)
        g = FunctionGraph([x], [v]).freeze()
        assert same_objects(pickle.loads(pickle.dumps(g)), g)


def _seed_vars():
    a, b = scalar("a"), scalar("b")
    return [a, b], [mul(sin(a), mul(b, b))]


_FINGERPRINT_SCRIPT = """
from tests.graph.utils import Inner, add, const, mul, scalar, sin
from verglas.graph import FunctionGraph
a, b = scalar("a"), scalar("b")
inner = Inner.from_vars([a, b], [mul(sin(a), mul(b, b))])
x, y = scalar("x"), scalar("y")
g = FunctionGraph([x, y], [add(inner(x, y), const(0.5)), const(2.0)]).freeze()
result = g.fingerprint()
print(result)
"""


class TestFingerprint:
    def fingerprint_here(self):
        ns: dict = {"print": lambda *args: None}
        exec(_FINGERPRINT_SCRIPT, ns)
        return ns["result"]

    def test_stable_within_process(self):
        assert self.fingerprint_here() == self.fingerprint_here()
        assert seed_001().freeze().fingerprint() == seed_001().freeze().fingerprint()

    def test_structure_changes_the_fingerprint(self):
        x = scalar("x")
        fps = {freeze([x], [add(x, const(c))]).fingerprint() for c in (0.0, -0.0, 1.0)}
        fps.add(freeze([x], [mul(x, const(0.0))]).fingerprint())
        assert len(fps) == 4

    def test_stable_across_processes_and_hash_seeds(self):
        expected = self.fingerprint_here()
        for seed in ("0", "12345"):
            env = dict(os.environ, PYTHONHASHSEED=seed,
                       PYTHONPATH=os.pathsep.join([str(ROOT)] + sys.path))
            got = subprocess.run([sys.executable, "-c", _FINGERPRINT_SCRIPT], env=env,
                                 cwd=ROOT, capture_output=True, text=True, check=True)
            assert got.stdout.strip() == expected


class TestWeakTables:
    def test_dropped_graph_is_freed(self):
        gc.collect()
        before = intern_table_sizes()
        x, y = vector("x"), vector("y")
        v, t = x, x.type
        for _ in range(50000):  # 1e5 nodes, built with Apply directly to keep the test fast
            v = Apply(sin, [Apply(add, [v, y], [t]).outputs[0]], [t]).outputs[0]
        g = freeze([x, y], [v])
        assert len(g.toposort()) == 100000
        assert intern_table_sizes()[0] >= 100000
        del g, v, x, y
        gc.collect()
        # Back to the value before (or below: earlier tests may free graphs meanwhile).
        after = intern_table_sizes()
        assert all(a <= b for a, b in zip(after, before)), (after, before)

    def test_live_graph_keeps_its_nodes(self):
        g = seed_001().freeze()
        gc.collect()
        assert seed_001().freeze().outputs[0] is g.outputs[0]


# -- property-based: random toy graphs ----------------------------------------------------------
_steps = st.lists(
    st.tuples(st.sampled_from(["add", "mul", "sub", "sin", "exp", "neg"]),
              st.lists(st.integers(0, 50), min_size=2, max_size=2)),
    min_size=2, max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(recipe=_steps, dedup=st.booleans())
def test_rebuilt_graphs_freeze_to_the_same_objects(recipe, dedup):
    g1 = freeze(*build_random_graph(recipe), dedup_nodes=dedup)
    g2 = freeze(*build_random_graph(recipe), dedup_nodes=dedup)
    assert g1 == g2 and hash(g1) == hash(g2) and same_objects(g1, g2)
    assert g1.fingerprint() == g2.fingerprint()
    assert g1.unfreeze().freeze(dedup_nodes=dedup) == g1
    check_graph(g1)


@settings(max_examples=40, deadline=None)
@given(recipe=_steps, dedup=st.booleans(), module=st.sampled_from([pickle, cloudpickle]))
def test_pickle_round_trips(recipe, dedup, module):
    g = freeze(*build_random_graph(recipe), dedup_nodes=dedup)
    assert same_objects(module.loads(module.dumps(g)), g)
    fg = FunctionGraph(*build_random_graph(recipe))
    assert module.loads(module.dumps(fg)).freeze(dedup_nodes=dedup) == g
