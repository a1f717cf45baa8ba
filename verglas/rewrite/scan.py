"""Scan rewrites (phase "scan").

`scan_remove_unused`: one reachability rewrite. The outer outputs nobody reads are dropped,
with every state, sequence slice and non-sequence the remaining outputs do not reach; states
that a kept output reads (through its taps) stay. `Scan.restrict` computes the smaller op
from the op's stored connection pattern, so the rewrite itself only moves the node's uses.
"""

from __future__ import annotations

from verglas.ops.scan import Scan
from verglas.rewrite.engine import node_rewriter
from verglas.rewrite.registry import register

__all__ = ["scan_remove_unused"]


@register(phase="scan", tags=("fast_run", "fast_compile"))
@node_rewriter(Scan)
def scan_remove_unused(fgraph, node):
    """Scan -> a Scan without the outputs nobody reads and the inputs they alone needed."""
    used = [k for k, out in enumerate(node.outputs) if fgraph.clients[out]]
    restricted = node.op.restrict(used)
    if restricted is None:
        return None
    new_op, in_idx, out_idx = restricted
    new = new_op.make_node(*[node.inputs[i] for i in in_idx])
    result = list(node.outputs)
    for k, var in zip(out_idx, new.outputs):
        result[k] = var
    return result
