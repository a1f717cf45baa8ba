"""Inplace: an elementwise output overwrites an input that nothing reads afterwards.

The last phase before compile freezes the graph. It attaches a DestroyHandler (inputs and
constants are protected; see verglas/graph/destroy.py) and, for each Elemwise node in
topological order, tries its inputs of the output's dtype and provably equal run-time shape:
the first replacement the handler accepts is kept, a rejected one is reverted. Then
set_subtensor / inc_subtensor nodes write into their `x` when the handler allows it. A graph with
inplace nodes must be frozen with `dedup_nodes=False` (compile does so), since two identical
inplace nodes own distinct buffers.

Tagged "fast_run" only: "fast_compile" allocates every result.
"""

from __future__ import annotations

from verglas.graph import Apply, Constant, InconsistencyError, ReplaceValidate
from verglas.graph.destroy import DestroyHandler
from verglas.ops.elemwise import Elemwise
from verglas.ops.indexing import AdvancedIncSubtensor, IncSubtensor
from verglas.rewrite.engine import graph_rewriter, node_rewriter
from verglas.rewrite.fusion import dim_keys
from verglas.rewrite.registry import register

__all__ = ["elemwise_inplace", "guard_inplace", "inc_subtensor_inplace"]


def guard_inplace(fgraph) -> None:
    """Attach what validated inplace replacements need (a DestroyHandler, ReplaceValidate)."""
    if not any(isinstance(f, ReplaceValidate) for f in fgraph.features):
        fgraph.attach_feature(ReplaceValidate())
    if not any(isinstance(f, DestroyHandler) for f in fgraph.features):
        fgraph.attach_feature(DestroyHandler())


def _candidate(fgraph, var, out, memo: dict | None) -> bool:
    """Cheap necessary conditions for `out` to overwrite `var` (the handler decides); `memo`
    None: `out` has `var`'s shape by construction."""
    if isinstance(var, Constant) or var.dtype != out.dtype:
        return False
    if var.owner is None:
        if var not in fgraph.destroyable():
            return False  # graph inputs are protected, but for those the graph may overwrite
    elif var.owner.op.view_map.get(var.index):
        return False  # a view may be strided: a result in it would not be contiguous
    if any(client == "output" for client, _ in fgraph.clients[var]):
        return False
    return memo is None or dim_keys(var, memo) == dim_keys(out, memo)


@register(phase="inplace", tags=("fast_run",))
@graph_rewriter
def elemwise_inplace(fgraph) -> None:
    """Make Elemwise outputs overwrite dead inputs of the same dtype and shape."""
    guard_inplace(fgraph)
    memo: dict = {}
    alive = fgraph.apply_nodes
    for node in fgraph.toposort():
        if node not in alive or type(node.op) is not Elemwise or node.op.inplace_pattern:
            continue
        pattern: list = []
        for j in range(len(node.outputs)):
            out = node.outputs[j]
            for i, var in enumerate(node.inputs):
                if any(i == k for _, k in pattern) or not _candidate(fgraph, var, out, memo):
                    continue
                trial = pattern + [(j, i)]
                op = Elemwise(node.op.scalar_op, tuple(trial))
                new = Apply(op, node.inputs, [o.type for o in node.outputs])
                try:
                    fgraph.replace_all_validate(list(zip(node.outputs, new.outputs)),
                                                reason="elemwise_inplace")
                except InconsistencyError:
                    continue
                pattern, node = trial, new
                break


@register(phase="inplace", tags=("fast_run",))
@node_rewriter(IncSubtensor, AdvancedIncSubtensor)
def inc_subtensor_inplace(fgraph, node):
    """set_subtensor / inc_subtensor -> the variant that writes into x (when x is dead)."""
    op = node.op
    x = node.inputs[0]
    if op.inplace or not _candidate(fgraph, x, node.outputs[0], None):
        return None
    guard_inplace(fgraph)  # the walker validates through the handler (a refusal: no match)
    new_op = type(op)(op.idx_list, op.set_instead_of_inc, inplace=True)
    return Apply(new_op, node.inputs, [o.type for o in node.outputs]).outputs
