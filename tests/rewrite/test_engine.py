"""The rewrite engine on toy ops: tracking, walk orders, equilibrium, cycles, merge, registry,
modes, pipeline order, tracing, failures, pickling and semantics preservation."""

from __future__ import annotations

import os
import pickle
import time

import numpy as np
import pytest

from tests.rewrite import toy
from tests.rewrite.toy import (
    Add,
    Exp,
    Log,
    Map,
    Mul,
    Neg,
    ScalarExp,
    ScalarLog,
    add,
    const,
    evaluate,
    exp,
    log,
    mul,
    neg,
    var,
)
from verglas.graph import Constant, FunctionGraph, InconsistencyError, ReplaceValidate, callback
from verglas.rewrite import (
    PHASES,
    EquilibriumRewriter,
    Mode,
    NodeRewriter,
    Registry,
    RewriteCycleError,
    RewriteError,
    RewriteProfile,
    RewriteWarning,
    SequenceRewriter,
    Tracer,
    build_pipeline,
    get_mode,
    graph_rewriter,
    in_to_out,
    merge,
    node_rewriter,
    optimize,
    out_to_in,
    rewrite_graph,
)

STRICT = Tracer(strict=True)

# -- rules used only here (module level: picklable) ----------------------------------------------
VISITED: list = []


@node_rewriter(None)
def record_visit(fgraph, node):
    VISITED.append(node.outputs[0].name)


@node_rewriter(Exp)
def count_exp(fgraph, node):
    VISITED.append(node.op)


@node_rewriter(Exp)
def exp_to_neg_neg(fgraph, node):
    """exp(x) -> neg(neg(x)): its new nodes must be visited in the same walk."""
    return [neg(neg(node.inputs[0]))]


@node_rewriter(Log)
def broken(fgraph, node):
    raise ValueError("boom")


@node_rewriter(Log)
def two_outputs(fgraph, node):
    return [node.inputs[0], node.inputs[0]]


@node_rewriter(Log)
def wrong_type(fgraph, node):
    return [toy.Variable(toy.TensorType("float32", ()), name="y32")]


@node_rewriter(Log)
def identity(fgraph, node):
    return [node.outputs[0]]


@graph_rewriter
def rename_outputs(fgraph):
    for out in fgraph.outputs:
        out.name = "renamed"


def named(var_, name):
    var_.name = name
    return var_


def chain(x, n, op=neg):
    for _ in range(n):
        x = op(x)
    return x


# -- tracking ----------------------------------------------------------------------------------
def test_rewriter_is_only_called_on_tracked_ops():
    x = var("x")
    y = add(exp(x), neg(log(exp(neg(x)))))
    VISITED.clear()
    in_to_out(count_exp)(FunctionGraph([x], [y]), STRICT)
    assert VISITED == [exp, exp]


def test_scalar_tracks_match_the_scalar_op_class():
    x = var("x")
    y = Map(ScalarExp())(Map(ScalarLog())(x))
    z = Map(ScalarLog())(Map(ScalarLog())(x))
    fg = FunctionGraph([x], [y, z])
    in_to_out(toy.map_exp_map_log)(fg, STRICT)
    assert fg.outputs[0] is x
    assert fg.outputs[1] is z


def test_node_rewriter_validates_tracks():
    with pytest.raises(TypeError):
        node_rewriter(int)
    with pytest.raises(TypeError):
        node_rewriter()
    assert node_rewriter([Add, Mul])(lambda fg, n: None).tracks == (Add, Mul)


# -- walk orders -------------------------------------------------------------------------------
def test_in_to_out_visits_producers_first_and_out_to_in_consumers_first():
    x = var("x")
    a = named(neg(x), "a")
    b = named(exp(a), "b")
    c = named(add(a, b), "c")
    VISITED.clear()
    in_to_out(record_visit)(FunctionGraph([x], [c]), STRICT)
    assert VISITED == ["a", "b", "c"]
    VISITED.clear()
    out_to_in(record_visit)(FunctionGraph([x], [c]), STRICT)
    assert VISITED == ["c", "b", "a"]


def test_nodes_imported_by_a_fire_are_visited_in_the_same_walk():
    x = var("x")
    fg = FunctionGraph([x], [log(exp(x))])
    in_to_out(exp_to_neg_neg, toy.neg_neg)(fg, STRICT)
    assert fg.outputs[0].owner.op == log and fg.outputs[0].owner.inputs[0] is x


def test_pruned_nodes_are_skipped():
    x = var("x")
    fg = FunctionGraph([x], [neg(neg(neg(neg(x))))])
    VISITED.clear()
    out_to_in(toy.neg_neg)(fg, STRICT)
    assert fg.outputs[0] is x
    assert not fg.apply_nodes


def test_same_object_replacement_is_no_change():
    x = var("x")
    fg = FunctionGraph([x], [log(x)])
    prof = RewriteProfile()
    in_to_out(identity)(fg, Tracer(profile=prof, strict=True))
    assert prof.rewrites["identity"][:2] == [1, 0]


# -- equilibrium and cycles --------------------------------------------------------------------
def test_equilibrium_reaches_a_fixed_point():
    x = var("x")
    y = mul(exp(log(neg(neg(add(x, const(0.0)))))), const(1.0))
    fg = FunctionGraph([x], [y])
    EquilibriumRewriter([toy.neg_neg, toy.mul_by_one, toy.add_zero, toy.exp_log])(fg, STRICT)
    assert fg.outputs[0] is x and not fg.apply_nodes


def test_out_to_in_needs_equilibrium_where_in_to_out_does_not():
    # exp(log(exp(log(x)))): out-to-in fires on the top first, leaving exp(log(x))
    x = var("x")
    fg = FunctionGraph([x], [exp(log(exp(log(x))))])
    out_to_in(toy.exp_log)(fg, STRICT)
    assert fg.outputs[0] is x  # imported nodes are revisited, and the top now reads exp(log(x))


def test_cycle_is_reported_with_both_names():
    x = var("x")
    fg = FunctionGraph([x], [neg(mul(x, const(2.0)))])
    cycle = EquilibriumRewriter([toy.mul_two_to_add, toy.add_self_to_mul], name="algebra")
    with pytest.raises(RewriteCycleError) as info:
        cycle(fg, STRICT)
    assert set(info.value.pair) == {"mul_two_to_add", "add_self_to_mul"}
    assert "mul_two_to_add" in str(info.value) and "add_self_to_mul" in str(info.value)
    assert "algebra" in str(info.value)
    # non-strict: a warning, and the graph is still a valid one computing the same thing
    with pytest.warns(RewriteWarning, match="undoing each other"):
        cycle(fg, Tracer(strict=False))
    assert evaluate([x], fg.outputs, [np.float64(3.0)]) == [-6.0]


def test_walker_is_bounded_too():
    x = var("x")
    fg = FunctionGraph([x], [mul(x, const(2.0))])
    with pytest.raises(RewriteCycleError):
        in_to_out(toy.mul_two_to_add, toy.add_self_to_mul)(fg, STRICT)


# -- merge -------------------------------------------------------------------------------------
def test_merge_identical_subgraphs_and_equal_constants():
    x, y = var("x"), var("y")
    a = add(exp(mul(x, const(2.0))), y)
    b = add(exp(mul(x, const(2.0))), y)
    fg = FunctionGraph([x, y], [a, b, neg(b)])
    assert len(fg.apply_nodes) == 7
    merge(fg, STRICT)
    assert len(fg.apply_nodes) == 4
    assert fg.outputs[0] is fg.outputs[1]
    assert fg.outputs[2].owner.inputs[0] is fg.outputs[0]


def test_merge_keeps_different_constants_and_ops_apart():
    x = var("x")
    fg = FunctionGraph([x], [mul(x, const(2.0)), mul(x, const(3.0)), add(x, const(2.0)),
                             mul(const(2.0), x)])
    merge(fg, STRICT)
    assert len(fg.apply_nodes) == 4
    consts = {id(n.inputs[1]) for n in fg.apply_nodes if isinstance(n.inputs[1], Constant)}
    assert len(consts) == 2  # the three 2.0 constants became one object


def test_merge_respects_validation():
    class NoMerge(ReplaceValidate):
        @callback
        def validate(self, fgraph):
            raise InconsistencyError("no")

    x = var("x")
    fg = FunctionGraph([x], [exp(x), exp(x)], features=[NoMerge()])
    merge(fg, STRICT)
    assert fg.outputs[0] is not fg.outputs[1]


def test_dead_code_is_pruned_by_the_function_graph():
    x = var("x")
    fg = FunctionGraph([x], [mul(exp(neg(x)), const(1.0))])
    in_to_out(toy.mul_by_one)(fg, STRICT)
    assert {n.op for n in fg.apply_nodes} == {exp, neg}


# -- registry, modes, pipeline -----------------------------------------------------------------
def _registry() -> Registry:
    reg = Registry()
    reg.register(merge, phase="merge", tags=("fast_run", "fast_compile"))
    reg.register(toy.neg_neg, phase="canonicalize", tags=("fast_run", "fast_compile"))
    reg.register(toy.mul_by_one, phase="canonicalize")
    reg.register(toy.exp_log, phase="specialize", tags=("fast_run", "numerics"))
    reg.register(toy.add_zero, phase="constant_folding")
    return reg


def test_mode_queries_by_tag_name_and_phase():
    reg = _registry()

    def names(mode):
        return [e.name for e in reg.query(mode)]

    assert names(get_mode("fast_run")) == ["merge", "neg_neg", "mul_by_one", "exp_log",
                                            "add_zero"]
    assert names(get_mode("fast_compile")) == ["merge", "neg_neg"]
    assert names(get_mode("fast_run").excluding("numerics")) == ["merge", "neg_neg",
                                                                 "mul_by_one", "add_zero"]
    assert names(get_mode("fast_run").excluding("mul_by_one", "canonicalize")) == [
        "merge", "exp_log", "add_zero"]
    assert names(get_mode("fast_compile").including("exp_log")) == ["merge", "neg_neg",
                                                                    "exp_log"]
    assert names(Mode(include=["specialize"])) == ["exp_log"]
    assert get_mode("fast_run").excluding("x") == get_mode("fast_run").excluding("x")
    with pytest.raises(ValueError):
        get_mode("fastest")
    with pytest.raises(ValueError):
        reg.register(toy.neg_neg, phase="canonicalize")


def test_pipeline_phase_order():
    assert [p.name for p in PHASES] == [
        "merge", "constant_folding", "canonicalize", "shape", "specialize",
        "optimize_inner_graphs", "scan", "fusion", "inplace"]
    reg = _registry()
    text = str(build_pipeline("fast_run", reg))
    assert text.index("merge") < text.index("constant_folding (equilibrium): add_zero")
    assert "canonicalize (equilibrium): neg_neg, mul_by_one" in text
    assert "fusion (once): -" in text
    reg.register(toy.add_self_to_mul, phase="nowhere")
    with pytest.raises(ValueError, match="unknown phase"):
        build_pipeline("fast_run", reg)


def test_pipeline_runs_phases_in_order_and_traces(capsys):
    x = var("x")
    # add_zero (constant_folding) must run before neg_neg (canonicalize), before exp_log
    fg = FunctionGraph([x], [exp(log(neg(neg(add(x, const(0.0))))))])
    rewrite_graph(fg, "fast_run", trace=True, registry=_registry())
    assert fg.outputs[0] is x
    # merge may first unify the 0.0 with an interned constant left alive by other tests
    lines = [ln for ln in capsys.readouterr().out.splitlines() if not ln.startswith("[merge]")]
    assert lines == [
        "[constant_folding] add_zero: add(x, 0.0) -> x",
        "[canonicalize] neg_neg: neg(Neg.out) -> x",
        "[specialize] exp_log: exp(Log.out) -> x",
    ]


def test_fast_compile_runs_fewer_rules():
    x = var("x")
    fg = FunctionGraph([x], [exp(log(neg(neg(x))))])
    rewrite_graph(fg, "fast_compile", trace=False, registry=_registry())
    assert fg.outputs[0].owner.op == exp


def test_trace_from_environment(capsys, monkeypatch):
    monkeypatch.setenv("VERGLAS_TRACE_REWRITES", "1")
    x = var("x")
    rewrite_graph(FunctionGraph([x], [neg(neg(x))]), registry=_registry())
    assert "neg_neg" in capsys.readouterr().out


def test_profile_counts(capsys):
    x = var("x")
    fg = FunctionGraph([x], [neg(neg(exp(neg(neg(exp(x))))))])
    prof = RewriteProfile()
    rewrite_graph(fg, "fast_run", trace=prof, registry=_registry())
    calls, fires, seconds = prof.rewrites["neg_neg"]
    assert fires == 2 and calls >= 4 and seconds >= 0
    assert prof.rewrites["merge"][0] >= 1
    assert set(prof.phases) == {"merge", "constant_folding", "canonicalize", "specialize"}
    assert "neg_neg" in str(prof)
    rewrite_graph(FunctionGraph([x], [neg(neg(x))]), trace="profile", registry=_registry())
    out = capsys.readouterr().out
    assert "rewrite" in out and "total" in out


# -- failures ----------------------------------------------------------------------------------
@pytest.mark.parametrize("rule, match", [(broken, "ValueError: boom"),
                                         (two_outputs, "expected a list of 1"),
                                         (wrong_type, "float32")])
def test_failing_rewrite_is_reported_with_name_and_node(rule, match):
    x = var("x")
    fg = FunctionGraph([x], [neg(log(x))])
    with pytest.raises(RewriteError, match=match) as info:
        in_to_out(rule)(fg, STRICT)
    assert rule.name in str(info.value) and "log(x)" in str(info.value)
    with pytest.warns(RewriteWarning, match=rule.name):
        in_to_out(rule, toy.neg_neg)(fg, Tracer(strict=False))
    assert fg.outputs[0].owner.inputs[0].owner.op == log  # skipped, graph intact


def test_failing_graph_rewriter_is_reported():
    @graph_rewriter
    def explode(fgraph):
        raise KeyError("k")

    x = var("x")
    with pytest.raises(RewriteError, match="explode"):
        SequenceRewriter([explode])(FunctionGraph([x], [neg(x)]), STRICT)


def test_tests_run_strict_by_default():
    assert os.environ.get("VERGLAS_STRICT_REWRITES") == "1"
    assert Tracer.from_options().strict
    x = var("x")
    with pytest.raises(RewriteError):
        in_to_out(broken)(FunctionGraph([x], [log(x)]))


# -- pickling ----------------------------------------------------------------------------------
def test_rewriters_pickle_by_reference():
    for rewriter in (toy.neg_neg, toy.map_exp_map_log, merge, rename_outputs):
        assert pickle.loads(pickle.dumps(rewriter)) is rewriter
    pipe = build_pipeline("fast_run", _registry())
    again = pickle.loads(pickle.dumps(pipe))
    assert str(again) == str(pipe)
    x = var("x")
    fg = FunctionGraph([x], [neg(neg(x))])
    again(fg, STRICT)
    assert fg.outputs[0] is x
    anonymous = NodeRewriter(toy.neg_neg.fn, (Neg,), name="copy")
    assert pickle.loads(pickle.dumps(anonymous)).name == "copy"
    mode = get_mode("fast_run").excluding("fusion")
    assert pickle.loads(pickle.dumps(mode)) == mode


# -- semantics ---------------------------------------------------------------------------------
def test_rewrites_preserve_results():
    rng = np.random.default_rng(0)
    x, y = var("x"), var("y")
    outs = [
        mul(add(exp(log(neg(neg(x)))), const(0.0)), const(1.0)),
        add(mul(exp(x), const(1.0)), exp(mul(x, const(1.0)))),
        neg(neg(add(mul(x, y), mul(x, y)))),
    ]
    for _ in range(5):
        values = [np.float64(rng.uniform(0.5, 2.0)), np.float64(rng.uniform(-2, 2))]
        before = evaluate([x, y], outs, values)
        ffg = optimize([x, y], outs, Mode(include=["fast_run"]), trace=False)
        after = evaluate(list(ffg.inputs), list(ffg.outputs), values)
        np.testing.assert_allclose(before, after)
    # optimize() works on a copy: the user's graph is untouched
    assert outs[0].owner.op == mul


def test_global_pipeline_has_merge_and_all_phases():
    pipe = build_pipeline("fast_run")
    assert [p.name for p in pipe.rewriters] == [p.name for p in PHASES]
    assert "merge (once): merge" in str(pipe)


# -- performance (a smoke bound; the figure is printed with -s) ---------------------------------
def test_engine_overhead_on_a_10000_node_chain():
    n = 10_000
    x = var("x")
    y = x
    for i in range(n // 2):
        y = mul(neg(y), const(1.0)) if i % 2 else add(exp(y), const(1.0))
    fg = FunctionGraph([x], [y])
    assert len(fg.apply_nodes) == n
    rules = [toy.neg_neg, toy.mul_by_one, toy.add_zero, toy.exp_log]
    t0 = time.process_time()
    EquilibriumRewriter(rules, [merge])(fg, STRICT)
    dt = time.process_time() - t0
    assert len(fg.apply_nodes) == 3 * n // 4  # every mul(., 1) is gone
    print(f"\nequilibrium+merge on {n} nodes: {dt * 1e3:.1f} ms, {dt / n * 1e6:.2f} us/node")
    assert dt < 5.0
