"""The two variants of a Program: specialized (no broadcasting at run time) and general.

numpy broadcasts a length-1 dim against any length, and a symbolic dim (None) may turn out
to be 1 at run time. Code that handles that everywhere is slow to compile and to run, and
users almost never rely on it. So the scheduler first hands out the specialized variant: dims
not statically 1 are taken to be equal wherever the shapes do not prove it, and the steps
listed by `broadcast_checks` check that assumption at run time (RuntimeBroadcast). A call that
breaks it runs the general variant (`Program.general()`), built on first use.

Under that assumption a SumToShape (the gradient's sum over broadcast axes) is the identity:
where its input dies at that step, its result takes the input's very array (`adopted`), no
copy and no loop.
"""

from __future__ import annotations

from verglas.graph.basic import Constant
from verglas.ops.elemwise import Elemwise, SumToShape

__all__ = ["broadcast_modes", "broadcast_checks", "adopted_steps", "specialized_sizes"]


def broadcast_modes(shapes, step) -> tuple:
    """Per input of an Elemwise step: "scalar" (one element), or per axis "full" (the output's
    length, proven), "bcast" (statically 1 against a longer output) or "unknown"."""
    out_dims = shapes.dims_of(step.outputs[0])
    out_static = step.node.outputs[0].type.shape
    modes = []
    for bid, var in zip(step.inputs, step.node.inputs):
        if all(d == 1 for d in var.type.shape):
            modes.append("scalar")
            continue
        in_dims = shapes.dims_of(bid)
        mode = []
        for k in range(var.ndim):
            if in_dims[k] is out_dims[k] or (var.type.shape[k] is not None
                                             and var.type.shape[k] == out_static[k]):
                mode.append("full")
            elif var.type.shape[k] == 1:
                mode.append("bcast")
            else:
                mode.append("unknown")
        modes.append(tuple(mode))
    return tuple(modes)


def broadcast_checks(steps, shapes) -> tuple[int, ...]:
    """Steps whose broadcasting the shapes do not prove: the specialized variant checks there
    that nothing broadcasts at run time."""
    out = []
    for step in steps:
        op = step.node.op
        if isinstance(op, Elemwise) and step.node.outputs[0].ndim:
            if any(m == "unknown" for mode in broadcast_modes(shapes, step)
                   if mode != "scalar" for m in mode):
                out.append(step.index)
        elif isinstance(op, SumToShape) and step.node.inputs[0].ndim:
            g, target = shapes.dims_of(step.inputs[0]), shapes.dims_of(step.outputs[0])
            if any(a is not b for a, b in zip(g, target)):
                out.append(step.index)
    return tuple(out)


def specialized_sizes(steps, shapes, checks, n_buffers: int):
    """A function giving each buffer a key that is the same for buffers whose element counts
    are equal in the specialized variant, for the memory plan: the dims a checked step takes
    to be equal (an input's axis of unknown broadcasting and the output's; a SumToShape's
    input and target axes) count as one length. A slot shared on that ground is checked
    where it is reused (a call that breaks the assumption then runs the general variant,
    which plans with the symbolic sizes alone)."""
    parent: dict = {}

    def find(d):
        while d in parent:
            d = parent[d]
        return d

    def union(a, b):
        a, b = find(a), find(b)
        if a is not b and not isinstance(b, Constant):
            parent[b] = a
        elif a is not b and not isinstance(a, Constant):
            parent[a] = b

    checked = set(checks)
    for step in steps:
        if step.index not in checked:
            continue
        if isinstance(step.node.op, Elemwise):
            out_dims = shapes.dims_of(step.outputs[0])
            for bid, mode in zip(step.inputs, broadcast_modes(shapes, step)):
                if mode == "scalar":
                    continue
                for k, (m, d) in enumerate(zip(mode, shapes.dims_of(bid))):
                    if m == "unknown":
                        union(d, out_dims[k])
        else:  # a SumToShape
            for d, t in zip(shapes.dims_of(step.inputs[0]), shapes.dims_of(step.outputs[0])):
                union(d, t)
    by_dims: dict = {}  # (static product, the dims' classes) -> a size variable of that kind
    for b in range(n_buffers):
        static, classes = 1, []
        for d in shapes.dims_of(b):
            if isinstance(d, Constant):
                static *= int(d.data)
            else:
                classes.append(find(d))
        size = shapes.size_of(b)
        first = by_dims.setdefault((static, tuple(sorted(classes, key=id))), size)
        union(first, size)
    return lambda b: find(shapes.size_of(b))


def adopted_steps(steps, buffers, outputs, live, slots, excluded=frozenset()) -> frozenset:
    """SumToShape steps (of the specialized variant) whose result takes its input's array.

    Allowed when both have storage slots of their own, the input is no output, neither is
    destroyed (inplace) while the other still needs the array, and, where the result outlives
    the input's slot (the two slots then swap arrays), neither slot holds a program output.
    `excluded`: steps that may not (a repeat's, whose iterations must find the same arrays).
    `outputs`: the outputs that must own their arrays (none for a loop body: the loop copies
    them out before the next step).
    """
    if not slots:
        return frozenset()
    outputs = set(outputs)
    output_slots = {slots[b] for b in outputs if slots[b] is not None}
    out = {}  # step index -> its input
    for step in steps:
        if (not isinstance(step.node.op, SumToShape) or not step.node.inputs[0].ndim
                or step.index in excluded):
            continue
        g, o = step.inputs[0], step.outputs[0]
        if slots[g] is None or slots[o] is None or g in outputs:
            continue
        s_in = slots[g]
        end = max(live[b][1] for b in range(len(buffers))
                  if slots[b] == s_in and live[b][0] <= step.index)
        destroyed = {b.takes_over for b in buffers
                     if b.takes_over is not None and live[b.id][0] > step.index}
        if end > step.index and (g in destroyed or o in destroyed or o in outputs):
            continue
        if live[o][1] > end and (s_in in output_slots or slots[o] in output_slots):
            continue
        out[step.index] = step
    # an input several results would take: those in its own slot may, or else the first
    # alone (a result in a slot of its own takes the array over, the two slots swapping
    # arrays, and another result bound to the array would be left in a slot the plan gives to
    # later buffers: a transformer's gradient read a weight's product after a later step had
    # written over it)
    takers: dict = {}
    for step in out.values():
        takers.setdefault(step.inputs[0], []).append(step)
    kept = set()
    for g, group in takers.items():
        same = [step.index for step in group if slots[step.outputs[0]] == slots[g]]
        kept.update(same or [group[0].index])
    return frozenset(kept)
