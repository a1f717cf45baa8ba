"""Reverse-mode accumulation through each op's `L_op`: `vjp`, and `backprop` under it.

The inner-graph ops differentiate their bodies with it (an OpFromGraph's gradient is an
OpFromGraph of the body's vjp, a Scan's a backward Scan), so it sits in the array language;
`verglas.grad.grad` is the user's entry point.
"""

from __future__ import annotations

import numpy as np

from verglas.graph.traversal import toposort
from verglas.ops.basic import as_tensor
from verglas.ops.math import cast, zeros_like

__all__ = ["vjp", "backprop"]


def vjp(outputs, output_grads, wrt) -> list:
    """Vector-Jacobian product: gradients w.r.t. `wrt` of `outputs` seeded with `output_grads`.

    An entry of `output_grads` may be None (no gradient flows from that output); a `wrt`
    variable the seeded outputs do not depend on gets None.
    """
    seeds: dict = {}
    for out, g in zip(outputs, output_grads, strict=True):
        if g is None:
            continue
        g = as_tensor(g)
        seeds[out] = g if out not in seeds else seeds[out] + g
    grads = backprop(seeds, list(wrt))
    return [grads.get(w) for w in wrt]


def backprop(seeds: dict, wrt_list: list) -> dict:
    """Accumulate gradients from `seeds` (variable -> gradient) back to every variable on a
    path from `wrt_list` to the seeded variables."""
    nodes = toposort(list(seeds))
    # only nodes that depend on some wrt variable carry gradient towards it
    reaches = set(wrt_list)
    on_path = []
    for node in nodes:
        if any(i in reaches for i in node.inputs):
            on_path.append(node)
            reaches.update(node.outputs)

    grads: dict = dict(seeds)
    for node in reversed(on_path):
        out_grads = [grads.get(o) for o in node.outputs]
        if all(g is None for g in out_grads):
            continue
        out_grads = [zeros_like(o) if g is None else g for o, g in zip(node.outputs, out_grads)]
        input_grads = node.op.L_op(list(node.inputs), list(node.outputs), out_grads)
        if len(input_grads) != len(node.inputs):
            raise ValueError(f"{node.op}.L_op returned {len(input_grads)} gradients for "
                             f"{len(node.inputs)} inputs")
        for inp, g in zip(node.inputs, input_grads):
            if g is None or inp not in reaches:
                continue
            g = as_tensor(g)
            if g.ndim != inp.ndim:
                raise ValueError(f"{node.op}.L_op: gradient of ndim {g.ndim} for an input of "
                                 f"ndim {inp.ndim}")
            if g.dtype != inp.dtype and np.dtype(inp.dtype).kind in "fc":
                g = cast(g, inp.dtype)
            prev = grads.get(inp)
            grads[inp] = g if prev is None else prev + g
    return grads
