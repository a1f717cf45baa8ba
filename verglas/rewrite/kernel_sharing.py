"""Kernel sharing: fused Composites that differ only in their constants become one op.

After fusion a large sum such as sum_i a_i*sin(x + i) is many Composites that are identical
but for the constants baked into them. Lifting those constants out as (one-element) inputs
makes them the very same interned op, so a backend compiles one kernel and calls it many
times: compile time then follows the number of distinct kernels, not the program's size.
Only groups of two or more Composites are rewritten: a lone Composite keeps its constants
folded into its code.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from verglas.graph.basic import Constant
from verglas.ops.basic import constant
from verglas.ops.composite import Composite, scalar_apply, scalar_variable
from verglas.ops.elemwise import Elemwise
from verglas.rewrite.engine import graph_rewriter
from verglas.rewrite.registry import register

__all__ = ["share_composite_kernels", "lift_constants"]


def lift_constants(composite: Composite):
    """(the Composite with its scalar constants as trailing inputs, their values) or None."""
    graph = composite.fgraph
    if any(isinstance(o, Constant) for o in graph.outputs):
        return None
    inputs = [scalar_variable(v.type.dtype) for v in graph.inputs]
    memo = dict(zip(graph.inputs, inputs))
    lifted, values = [], []
    for node in graph.toposort():
        args = []
        for var in node.inputs:
            if isinstance(var, Constant) and var not in memo:
                memo[var] = scalar_variable(var.type.dtype)
                lifted.append(memo[var])
                values.append(var)
            args.append(memo[var])
        new = scalar_apply(node.op, args)
        memo.update(zip(node.outputs, new.outputs))
    if not values:
        return None
    return Composite.from_variables(inputs + lifted, [memo[o] for o in graph.outputs]), values


@register(phase="fusion", tags=("fast_run",))
@graph_rewriter
def share_composite_kernels(fgraph) -> None:
    """Give Composites that differ only in constants one op (constants become inputs)."""
    groups = defaultdict(list)
    for node in fgraph.toposort():
        op = node.op
        if isinstance(op, Elemwise) and isinstance(op.scalar_op, Composite) \
                and not op.inplace_pattern:
            lifted = lift_constants(op.scalar_op)
            if lifted is not None:
                groups[lifted[0]].append((node, lifted[1]))
    for op, members in groups.items():
        if len(members) < 2:
            continue
        for node, values in members:
            ndim = node.outputs[0].ndim
            extra = [constant(np.full((1,) * ndim, v.data, dtype=v.type.dtype)) for v in values]
            outs = Elemwise(op)(*node.inputs, *extra)
            outs = outs if isinstance(outs, list) else [outs]
            fgraph.replace_all(list(zip(node.outputs, outs)), reason="share_composite_kernels")
