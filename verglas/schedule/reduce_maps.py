"""Reductions of maps: a reduction that computes its elementwise producer inside its own loop.

`sum(exp(x))` as two steps writes exp(x) to memory and reads it back; as one, the reduction
reads x and applies exp to each element as it accumulates: one pass, no temporary. The
scheduler decides it here, for every backend (the CPU's reduction loops, one CUDA kernel).

A reduction takes its producer when:
- the producer is an Elemwise with one output, no inplace, not a program output, and read
  by that reduction alone (broadcasting the shapes do not prove is checked, in the specialized
  variant, or done, in the general one, by the reduction's loop);
- at least one of its inputs is an array (its shape gives the loop's);
- only views and shape reads lie between the two steps;
- neither is in a row group (which fuses its own way).
The producer's output then has no storage, and its inputs live until the reduction (the memory
plan hands their storage to nothing in between, not to the reduction's result either).
"""

from __future__ import annotations

from verglas.ops.elemwise import Elemwise
from verglas.ops.reduce import Reduce
from verglas.schedule.variants import broadcast_modes

__all__ = ["reduce_maps"]


def reduce_maps(steps, outputs, shapes, excluded=frozenset()) -> tuple[tuple[int, int], ...]:
    """(reduction step index, the producer step index it computes) pairs."""
    readers: dict[int, list[int]] = {}
    for step in steps:
        for b in set(step.inputs):
            readers.setdefault(b, []).append(step.index)
    producer_of = {b: s for s in steps for b in s.outputs}
    outs = set(outputs)
    found = []
    for step in steps:
        if not isinstance(step.node.op, Reduce) or step.index in excluded:
            continue
        prod = producer_of.get(step.inputs[0])
        if prod is None or prod.index in excluded or not _fusable(prod, shapes):
            continue
        b = step.inputs[0]
        if b in outs or readers.get(b) != [step.index]:
            continue
        between = steps[prod.index + 1:step.index]
        if any(not (s.node.op.reads_shape_only or s.node.op.view_map) for s in between):
            continue
        found.append((step.index, prod.index))
    return tuple(found)


def _fusable(prod, shapes) -> bool:
    node = prod.node
    if (not isinstance(node.op, Elemwise) or len(node.outputs) != 1 or node.op.destroy_map
            or node.outputs[0].ndim == 0 or node.outputs[0].dtype == "float16"):
        return False
    return any(m != "scalar" for m in broadcast_modes(shapes, prod))
