"""FunctionGraph: clients, import/prune, replace, toposort, clone, Features, History, pickling."""

import pickle

import cloudpickle
import pytest

from tests.graph.utils import add, const, exp, mul, neg, sin, split, vector
from verglas.graph import (OUTPUT, AlreadyThere, Feature, FunctionGraph, History,
                           InconsistencyError, MissingInputError, ReplaceValidate, TensorType,
                           callback, check_graph)

PICKLERS = [pytest.param(pickle, id="pickle"), pytest.param(cloudpickle, id="cloudpickle")]


def small_graph():
    x, y = vector("x"), vector("y")
    s = sin(x)
    z = add(s, y)
    return x, y, s, z, FunctionGraph([x, y], [mul(z, s)])


class Recorder(Feature):
    """Records every event it registered for."""

    provides = ("events_of",)

    def __init__(self):
        self.events = []

    @callback
    def on_attach(self, fgraph):
        self.events.append(("attach",))

    @callback
    def on_detach(self, fgraph):
        self.events.append(("detach",))

    @callback
    def on_import(self, fgraph, node, reason):
        self.events.append(("import", str(node.op)))

    @callback
    def on_prune(self, fgraph, node, reason):
        self.events.append(("prune", str(node.op)))

    @callback
    def on_change_input(self, fgraph, node, i, old, new, reason):
        self.events.append(("change", i))

    @callback
    def validate(self, fgraph):
        self.events.append(("validate",))

    def events_of(self, fgraph, kind):
        return [e for e in self.events if e[0] == kind]


class Undecorated(Feature):
    """Has methods named like callbacks, but none is registered."""

    def __init__(self):
        self.called = []

    def on_import(self, fgraph, node, reason):
        self.called.append("on_import")

    def on_attach(self, fgraph):
        self.called.append("on_attach")


class NoExp(Feature):
    """Validation fails while the graph holds an exp node."""

    @callback
    def validate(self, fgraph):
        if any(str(n.op) == "exp" for n in fgraph.apply_nodes):
            raise InconsistencyError("exp is not allowed")


class TestStructure:
    def test_clients(self):
        x, y, s, z, fg = small_graph()
        out = fg.outputs[0]
        assert fg.clients[x] == [(s.owner, 0)]
        assert sorted(fg.clients[s], key=lambda c: c[1]) == [(z.owner, 0), (out.owner, 1)]
        assert fg.clients[out] == [(OUTPUT, 0)]
        assert fg.apply_nodes == {s.owner, z.owner, out.owner}
        check_graph(fg)

    def test_toposort_is_deterministic_and_ordered(self):
        x, y, s, z, fg = small_graph()
        order = fg.toposort()
        assert order == [s.owner, z.owner, fg.outputs[0].owner]
        assert order == fg.toposort()

    def test_replace_prunes_and_imports(self):
        x, y, s, z, fg = small_graph()
        rec = Recorder()
        fg.attach_feature(rec)
        new = exp(x)
        fg.replace(z, new, reason="test")
        assert z.owner not in fg.apply_nodes and new.owner in fg.apply_nodes
        assert z not in fg.clients and fg.clients[y] == []
        assert fg.events_of("import") == [("import", "exp")]
        assert fg.events_of("prune") == [("prune", "add")]
        check_graph(fg)

    def test_replace_all_and_outputs(self):
        x, y, s, z, fg = small_graph()
        fg.replace_all([(s, neg(x)), (fg.outputs[0], add(x, y))])
        assert str(fg.outputs[0].owner.op) == "add" and len(fg.apply_nodes) == 1
        check_graph(fg)

    def test_replace_with_another_type(self):
        x, y, s, z, fg = small_graph()
        other = TensorType("float32", (None,)).make_variable("w")
        with pytest.raises(TypeError, match=r"cannot replace .*float64.*float32"):
            fg.replace(s, other)
        check_graph(fg)

    def test_replace_with_more_specific_type_is_allowed(self):
        x, y, s, z, fg = small_graph()
        fixed = TensorType("float64", (3,)).make_variable("f")
        fg2 = FunctionGraph([x, y, fixed], fg.outputs)
        fg2.replace(s, sin(fixed))
        check_graph(fg2)

    def test_missing_inputs_are_named(self):
        x, y, hidden = vector("x"), vector("y"), vector("hidden")
        with pytest.raises(MissingInputError, match="hidden"):
            FunctionGraph([x, y], [add(x, sin(hidden))])
        fg = FunctionGraph([x], [sin(x)])
        with pytest.raises(MissingInputError, match="hidden"):
            fg.replace(fg.outputs[0], add(x, hidden))

    def test_constants_are_not_missing(self):
        x = vector("x")
        fg = FunctionGraph([x], [add(x, const([1.0]).clone())])
        check_graph(fg)

    def test_bad_inputs(self):
        x = vector("x")
        with pytest.raises(ValueError, match="root variables"):
            FunctionGraph([sin(x)], [x])
        with pytest.raises(ValueError, match="given twice"):
            FunctionGraph([x, x], [sin(x)])

    def test_clone(self):
        x, y, s, z, fg = small_graph()
        fg.attach_feature(History())
        new = fg.clone(with_features=True)
        assert new.inputs[0] is not x and new.outputs[0] is not fg.outputs[0]
        assert [str(n.op) for n in new.toposort()] == [str(n.op) for n in fg.toposort()]
        assert new.apply_nodes.isdisjoint(fg.apply_nodes)
        assert isinstance(new.features[0], History)
        assert new.freeze() == fg.freeze()
        check_graph(new)

    def test_multi_output_nodes(self):
        x = vector("x")
        a, b = split(x)
        fg = FunctionGraph([x], [add(a, b)])
        fg.replace(b, sin(x))
        assert a.owner in fg.apply_nodes  # still used through output 0
        fg.replace(a, neg(x))
        assert a.owner not in fg.apply_nodes
        check_graph(fg)


class TestFeatures:
    def test_only_decorated_callbacks_dispatch(self):
        x, y, s, z, fg = small_graph()
        feat = Undecorated()
        fg.attach_feature(feat)
        fg.replace(z, exp(x))
        assert feat.called == [] and Undecorated.callbacks == frozenset()
        assert Recorder.callbacks == {"on_attach", "on_detach", "on_import", "on_prune",
                                      "on_change_input", "validate"}

    def test_callback_events(self):
        x, y, s, z, fg = small_graph()
        rec = Recorder()
        fg.attach_feature(rec)
        fg.replace(s, neg(x))
        fg.validate()
        fg.remove_feature(rec)
        kinds = [e[0] for e in rec.events]
        assert kinds[0] == "attach" and kinds[-1] == "detach"
        assert ("import", "neg") in rec.events and ("prune", "sin") in rec.events
        assert kinds.count("change") == 2 and "validate" in kinds

    def test_callback_name_is_checked(self):
        with pytest.raises(ValueError, match="on_imprt"):
            @callback
            def on_imprt(self, fgraph):
                pass

    def test_provides(self):
        x, y, s, z, fg = small_graph()
        with pytest.raises(AttributeError, match="events_of"):
            fg.events_of("attach")
        rec = Recorder()
        fg.attach_feature(rec)
        assert fg.events_of("attach") == [("attach",)]
        with pytest.raises(AlreadyThere):
            fg.attach_feature(Recorder())
        with pytest.raises(AlreadyThere):
            fg.attach_feature(rec)
        fg.remove_feature(rec)
        with pytest.raises(AttributeError):
            fg.events_of("attach")

    def test_provides_must_exist(self):
        with pytest.raises(TypeError, match="missing_method"):
            class Bad(Feature):
                provides = ("missing_method",)

    def test_provides_cannot_shadow_graph_methods(self):
        class Shadow(Feature):
            provides = ("replace",)

            def replace(self, fgraph):
                pass

        x, y, s, z, fg = small_graph()
        with pytest.raises(AlreadyThere, match="replace"):
            fg.attach_feature(Shadow())


class TestHistory:
    def test_checkpoint_revert(self):
        x, y, s, z, fg = small_graph()
        fg.attach_feature(History())
        before = fg.freeze()
        chk = fg.checkpoint()
        fg.replace(s, neg(x))
        fg.replace(fg.outputs[0], exp(fg.outputs[0]))
        assert fg.freeze() != before
        fg.revert(chk)
        assert fg.freeze() == before
        check_graph(fg)

    def test_replace_all_validate_rolls_back(self):
        x, y, s, z, fg = small_graph()
        fg.attach_feature(ReplaceValidate())
        fg.attach_feature(NoExp())
        assert any(isinstance(f, History) for f in fg.features)
        before = fg.freeze()
        with pytest.raises(InconsistencyError):
            fg.replace_all_validate([(s, neg(x)), (z, exp(y))])
        assert fg.freeze() == before
        check_graph(fg)
        fg.replace_all_validate([(s, neg(x))])
        assert fg.freeze() != before
        check_graph(fg)

    @pytest.mark.parametrize("module", PICKLERS)
    def test_seed_002_pickle_mid_rewrite_then_keep_rewriting(self, module):
        # Regression: a graph with History + ReplaceValidate, partially rewritten, pickled and
        # unpickled, must still checkpoint, validate, roll back and revert.
        x, y, s, z, fg = small_graph()
        fg.attach_feature(ReplaceValidate())
        fg.attach_feature(NoExp())
        fg.attach_feature(Recorder())
        fg.replace_all_validate([(s, neg(x))], reason="first pass")
        mid = fg.freeze()

        fg2 = module.loads(module.dumps(fg))
        check_graph(fg2)
        assert fg2.freeze() == mid
        assert fg2 is not fg and fg2.inputs[0] is not fg.inputs[0]
        x2, y2 = fg2.inputs
        chk = fg2.checkpoint()
        [out] = fg2.outputs
        with pytest.raises(InconsistencyError):
            fg2.replace_all_validate([(out, exp(out))])
        assert fg2.freeze() == mid
        fg2.replace_all_validate([(out, add(out, y2))], reason="second pass")
        assert fg2.freeze() != mid
        assert fg2.events_of("import")[-1] == ("import", "add")
        fg2.revert(chk)
        assert fg2.freeze() == mid
        check_graph(fg2)
        # the original is untouched and can still rewrite on its own
        fg.replace_all_validate([(fg.outputs[0], sin(fg.outputs[0]))])
        check_graph(fg)
        fg.revert(0)
        assert fg.freeze() == small_graph()[-1].freeze()

    def test_pickle_deep_graph(self):
        x = vector("x")
        v = x
        for _ in range(5000):
            v = sin(v)
        fg = FunctionGraph([x], [v], features=[ReplaceValidate()])
        fg2 = pickle.loads(pickle.dumps(fg))
        assert len(fg2.apply_nodes) == 5000
        fg2.replace_all_validate([(fg2.outputs[0], neg(fg2.outputs[0]))])
        check_graph(fg2)
