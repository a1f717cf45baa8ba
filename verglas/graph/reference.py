"""The reference executor: runs a frozen graph through each op's numpy `perform`.

It is the oracle every backend is tested against, so it checks what ops return (dtype, ndim,
static shape) and hands ops read-only inputs, so an op that writes into its input fails loudly.
"""

from __future__ import annotations

import numpy as np

from verglas.graph.basic import Constant
from verglas.graph.frozen import FrozenFunctionGraph

__all__ = ["ReferenceRunner"]


class ReferenceRunner:
    """Evaluates a FrozenFunctionGraph node by node with numpy."""

    def __init__(self, graph: FrozenFunctionGraph, writable_inputs=()):
        """`writable_inputs`: positions of the graph inputs its inplace ops may overwrite (a
        loop body's dead previous state, Scan.overwritable_inputs): handed over as they are."""
        self.graph = graph
        self.writable = frozenset(writable_inputs)
        self.nodes = graph.toposort()
        # free each intermediate after its last use
        last_use: dict = {}
        for k, node in enumerate(self.nodes):
            for var in node.inputs:
                last_use[var] = k
        keep = set(graph.outputs)
        self.free_after = [[] for _ in self.nodes]
        for var, k in last_use.items():
            if var.owner is not None and var not in keep:
                self.free_after[k].append(var)
        # inputs an inplace op overwrites, when they are intermediates (graph inputs and
        # constants stay read-only, so an op destroying one fails loudly)
        writable = {graph.inputs[i] for i in self.writable}
        self.destroyed = [[i for ins in node.op.destroy_map.values() for i in ins
                           if node.inputs[i].owner is not None or node.inputs[i] in writable]
                          for node in self.nodes]

    def __call__(self, args: list) -> list:
        values: dict = {}
        for k, (var, arg) in enumerate(zip(self.graph.inputs, args)):
            view = arg.view()
            view.flags.writeable = k in self.writable and arg.flags.writeable
            values[var] = view
        for k, node in enumerate(self.nodes):
            inputs = [values[v] if not isinstance(v, Constant) else v.data for v in node.inputs]
            for i in self.destroyed[k]:
                if not inputs[i].flags.writeable:  # e.g. a broadcast view: overwrite a copy
                    inputs[i] = inputs[i].copy()
            storage = [[None] for _ in node.outputs]
            node.op.perform(node, inputs, storage)
            for var, (value,) in zip(node.outputs, storage):
                values[var] = _checked(node, var, value)
            for var in self.free_after[k]:
                values.pop(var, None)
        return [values[v] if not isinstance(v, Constant) else v.data for v in self.graph.outputs]


def _checked(node, var, value):
    if not isinstance(value, np.ndarray):
        if isinstance(value, np.generic) or np.isscalar(value):
            value = np.asarray(value)
        else:
            raise TypeError(f"{node.op}.perform stored {type(value).__name__}, not an array")
    if value.dtype.name != var.type.dtype:
        raise TypeError(f"{node.op}.perform returned dtype {value.dtype.name}, its output type "
                        f"says {var.type.dtype}")
    if value.ndim != var.type.ndim:
        raise TypeError(f"{node.op}.perform returned ndim {value.ndim}, its output type says "
                        f"{var.type.ndim}")
    for axis, (want, got) in enumerate(zip(var.type.shape, value.shape)):
        if want is not None and want != got:
            raise ValueError(f"{node.op}: output dimension {axis} has length {got}, the static "
                             f"shape says {want}")
    return value
