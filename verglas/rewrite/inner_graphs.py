"""Inner graphs: optimize each OpFromGraph / Scan body once, and inline OpFromGraph(inline=True).

`optimize_inner_graphs` (phase "optimize_inner_graphs") rewrites the inner graph of every
distinct inner-graph op with the outer mode, every rule included (the stabilizing ones too:
an expression's numerics do not depend on whether it sits in a loop body) but inplace: the
scan phase's loop rewrites come next and rebuild bodies. `inner_graphs_fusion` (phase
"fusion") fuses the elementwise work those rewrites brought into bodies with the body's own.
`inner_graphs_inplace` (phase "inplace") then does inplace inside every inner graph: its
inputs are protected like any graph's inputs, and a body with inplace nodes is frozen with
`dedup_nodes=False`. Inner graphs are immutable values, so each result is a NEW op; every
node applying the old op is moved onto it, and an op used N times is rewritten once. Nested
inner graphs are reached through the inner pipeline, which runs these rewrites again.

`inline_op_from_graph` (phase "canonicalize") replaces a node of an OpFromGraph built with
`inline=True` by its inner graph rebuilt on the node's inputs; `ofg_remove_unused` (same
phase) gives a node whose outputs are not all read a new OpFromGraph computing only those
that are.
"""

from __future__ import annotations

import time

from verglas.graph import InconsistencyError
from verglas.graph.destroy import DestroyHandler
from verglas.ops.op_from_graph import OpFromGraph, inline_ofg
from verglas.ops.scan import Scan
from verglas.rewrite.engine import GraphRewriter, node_rewriter
from verglas.rewrite.pipeline import PHASES, build_pipeline
from verglas.rewrite.registry import Mode, get_mode, register
from verglas.rewrite.trace import Tracer
from verglas.rewrite.utils import restrict_to_read_outputs

__all__ = ["InnerGraphOptimizer", "InnerGraphsFusion", "InnerGraphsInplace",
           "inline_op_from_graph", "inner_graphs_fusion", "inner_graphs_inplace",
           "ofg_remove_unused", "optimize_inner_graphs", "optimized_op"]


def optimized_op(op, mode: Mode, tracer: Tracer | None = None):
    """`op` (an OpFromGraph or Scan) with its inner graph rewritten by `mode`'s pipeline: a new
    op, or `op` itself when nothing changed."""
    inner = op.fgraph.unfreeze()
    overwritable = getattr(op, "overwritable_inputs", ())
    if overwritable:  # (inplace may overwrite those inputs: a loop's dead previous state)
        inner.attach_feature(DestroyHandler([inner.inputs[i] for i in overwritable]))
    sub = Tracer(strict=tracer.strict if tracer is not None else False)
    if tracer is not None:
        sub.echo, sub.file, sub.profile = tracer.echo, tracer.file, tracer.profile
    sub.mode = mode
    build_pipeline(mode)(inner, sub)
    inplace = any(node.op.destroy_map for node in inner.apply_nodes)
    frozen = inner.freeze(dedup_nodes=not inplace)
    if frozen == op.fgraph:
        return op
    if isinstance(op, Scan):
        return Scan.from_graph(frozen, op.layout)
    return op.replace(fgraph=frozen)


class _EachInnerOp(GraphRewriter):
    """Moves every OpFromGraph / Scan node onto `optimized_op(op, self.mode_of(mode))`, one
    call per distinct op."""

    def mode_of(self, mode: Mode) -> Mode:
        raise NotImplementedError

    def apply(self, fgraph, run):
        tracer = run.tracer
        mode = self.mode_of(tracer.mode or get_mode("fast_run"))
        replace = getattr(fgraph, "replace_all_validate", None) or fgraph.replace_all
        done: dict = {}  # old op -> new op: one optimization per distinct op
        t0 = time.perf_counter()
        fired = False
        for node in fgraph.toposort():
            op = node.op
            if not isinstance(op, (OpFromGraph, Scan)) or node not in fgraph.apply_nodes:
                continue
            new_op = done.get(op)
            if new_op is None:
                new_op = done[op] = optimized_op(op, mode, tracer)
                done[new_op] = new_op  # an op already optimized here stays as it is
            if new_op is op:
                continue
            new = new_op.make_node(*node.inputs)
            try:
                replace(list(zip(node.outputs, new.outputs)), reason=self.name)
            except InconsistencyError:
                continue
            fired = True
            if tracer.echo:
                tracer.fired(self.name, node, new.outputs)
        if tracer.profile is not None:
            tracer.profile.record(self.name, time.perf_counter() - t0, fired)


class InnerGraphOptimizer(_EachInnerOp):
    """Moves every OpFromGraph / Scan node onto a new op whose inner graph is optimized (all
    but inplace: the loop rewrites of the scan phase rebuild bodies after this, and inplace
    comes last, `inner_graphs_inplace`)."""

    name = "optimize_inner_graphs"

    def mode_of(self, mode: Mode) -> Mode:
        return mode.excluding("inplace")


class InnerGraphsFusion(_EachInnerOp):
    """Fusion in every inner graph again, baked into a new op: the scan phase's loop rewrites
    bring elementwise work into bodies already optimized (`scan_push_in_seqs`), and it fuses
    with the body's own."""

    name = "inner_graphs_fusion"

    def mode_of(self, mode: Mode) -> Mode:
        return mode.excluding(*(p.name for p in PHASES if p.name != "fusion"))


class InnerGraphsInplace(_EachInnerOp):
    """Inplace in every inner graph, as in the outer one (the graph's inputs protected), baked
    into a new op frozen with `dedup_nodes=False`."""

    name = "inner_graphs_inplace"

    def mode_of(self, mode: Mode) -> Mode:
        return mode.excluding(*(p.name for p in PHASES if p.name != "inplace"))


optimize_inner_graphs = register(InnerGraphOptimizer(), phase="optimize_inner_graphs",
                                 tags=("fast_run", "fast_compile"))
inner_graphs_fusion = register(InnerGraphsFusion(), phase="fusion", tags=("fast_run",))
inner_graphs_inplace = register(InnerGraphsInplace(), phase="inplace", tags=("fast_run",))


@register(phase="canonicalize", tags=("fast_run", "fast_compile"))
@node_rewriter(OpFromGraph)
def ofg_remove_unused(fgraph, node):
    """OpFromGraph -> a new OpFromGraph without the outputs nobody reads (nor the inputs only
    they read): its sub-program computes nothing that is thrown away."""
    return restrict_to_read_outputs(fgraph, node)


@register(phase="canonicalize", tags=("fast_run", "fast_compile"))
@node_rewriter(OpFromGraph)
def inline_op_from_graph(fgraph, node):
    """OpFromGraph(inline=True)(inputs) -> its inner graph rebuilt on `inputs`."""
    if not node.op.inline:
        return None
    return inline_ofg(node.op, node.inputs)
