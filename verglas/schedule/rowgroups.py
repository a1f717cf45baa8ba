"""Row groups: consecutive steps over the rows of one shape that run as ONE loop over rows.

softmax is a max over each row, a shifted exp, a sum over each row and a division: four passes
over the whole array as separate steps, one pass in row order when fused (each row in cache,
and on a GPU one kernel with one read of the input). A row is the last axis: an (R, C) array
has R rows, a (B, T, C) array B*T of them. A step joins a group when it is an Elemwise over
(..., C) or (..., 1) whose broadcasting is proven statically (the leading axes all the rows'
or all 1) or, in the specialized variant, checked at run time (the group compares those
lengths before its loop: layernorm's gamma), or a Sum/Max/Min over the last axis, and the
leading dims are the very same dimensions (the shape graph is interned, so this is an
identity test). A group has at least one reduction. Backends see every member as 2-d,
(rows, C), (rows, 1) or (1, C): N-d buffers are reshaped (views, C-contiguous) at the
group's start.

The group also decides what its buffers need:
- `local`: buffers the group both writes and alone reads never get their (R, C) storage: one
  row of scratch ("row") or one value per row ("value") serves the loop;
- `inlined`: an elementwise step whose one output only the next reduction reads is computed
  inside that reduction's loop, never stored (logsumexp's exp);
- `riding`: a reduction over an elementwise output that other steps read too accumulates in
  the producer's own loop as each value is stored (softmax's sum of exp).
Both backends emit a group as one loop (CPU) or one kernel (CUDA) from these decisions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from verglas.ops.elemwise import Elemwise
from verglas.ops.reduce import Max, Min, Sum
from verglas.schedule.variants import broadcast_modes

__all__ = ["RowGroup", "row_groups", "row_modes", "assumed_inputs", "is_row_reduce"]

_REDUCES = (Sum, Max, Min)


@dataclass(frozen=True, eq=False)
class RowGroup:
    """Steps (consecutive in the Program) that run as one loop over rows."""

    steps: tuple  # the member Steps, in order
    rows: tuple  # the leading dims, whose product is the row count: shape-graph variables
    local: dict  # buffer id -> "row" | "value": no (R, C) storage (see the module doc)
    inlined: dict  # elementwise step index -> the reduction step index whose loop computes it
    riding: dict  # reduction step index -> the elementwise step index whose loop accumulates it
    # elementwise step index -> per input: (rows, columns), each "full" or "bcast", or "scalar"
    modes: dict

    @property
    def first(self) -> int:
        return self.steps[0].index

    @property
    def last(self) -> int:
        return self.steps[-1].index

    @property
    def index(self) -> int:
        return self.first

    @property
    def ndim(self) -> int:
        """The ndim of the members' (rows..., C) buffers."""
        return len(self.rows) + 1

    def buffers(self) -> set[int]:
        """Every buffer a member reads or writes."""
        return {b for s in self.steps for b in (*s.inputs, *s.outputs)}


def is_row_reduce(node) -> bool:
    """A reduction a row group takes: Sum/Max/Min over the last axis of an array of 2+ dims."""
    if not isinstance(node.op, _REDUCES) or not node.inputs:  # (a node with no inputs)
        return False
    ndim = node.inputs[0].ndim
    return ndim >= 2 and node.op.axis == (ndim - 1,)


def _row_dims(shapes, step) -> tuple | None:
    node = step.node
    if isinstance(node.op, Elemwise) and node.outputs[0].ndim >= 2:
        return tuple(shapes.dims_of(step.outputs[0])[:-1])
    if is_row_reduce(node):
        return tuple(shapes.dims_of(step.inputs[0])[:-1])
    return None


def _same_rows(a, b) -> bool:
    return a is not None and b is not None and len(a) == len(b) \
        and all(x is y for x, y in zip(a, b))


def row_modes(shapes, step, assumed=frozenset()) -> tuple | None:
    """Per input of an Elemwise step: (rows, columns), each 'full' or 'bcast', or 'scalar';
    None when some broadcasting is only known at run time (unless the step is `assumed`:
    the specialized variant checks there that nothing broadcasts, so such an axis is
    'full'), or the leading axes of an input mix the rows' length and 1 (a (B, 1, C) input
    of a (B, T, C) group)."""
    ndim = step.node.outputs[0].ndim
    if any(var.ndim != ndim for var in step.node.inputs):
        return None
    out = []
    for mode in broadcast_modes(shapes, step):
        if mode == "scalar":
            out.append(mode)
            continue
        if step.index in assumed:
            mode = tuple("full" if m == "unknown" else m for m in mode)
        if "unknown" in mode or len(set(mode[:-1])) != 1:
            return None
        out.append((mode[0], mode[-1]))
    return tuple(out)


def assumed_inputs(shapes, step) -> list[int]:
    """The inputs of an Elemwise step whose broadcasting is known only at run time."""
    return [i for i, mode in enumerate(broadcast_modes(shapes, step))
            if mode != "scalar" and "unknown" in mode]


def _fits(shapes, step, assumed) -> bool:
    if is_row_reduce(step.node):
        return np.dtype(step.node.inputs[0].dtype).kind in "fiu"
    return row_modes(shapes, step, assumed) is not None


def row_groups(steps, buffers, outputs, shapes, assumed=frozenset()) -> list[RowGroup]:
    """The row groups of a program's `steps` (consecutive runs over one row dimension with a
    reduction among them). The steps in `assumed` have their run-time broadcasting checked
    (the specialized variant): they join a group as if it were proven absent (layernorm's
    scale and shift, of a length known only at run time)."""
    groups = []
    i = 0
    while i < len(steps):
        rows = _row_dims(shapes, steps[i])
        j = i
        while (j < len(steps) and _same_rows(_row_dims(shapes, steps[j]), rows)
               and _fits(shapes, steps[j], assumed)):
            j += 1
        members = steps[i:j]
        if len(members) >= 2 and any(is_row_reduce(s.node) for s in members):
            groups.append(_group(tuple(members), rows, steps, buffers, outputs, shapes,
                                 assumed))
            i = j
        else:
            i += 1
    return groups


def _group(members, rows, steps, buffers, outputs, shapes, assumed) -> RowGroup:
    local = _row_locals(members, steps, buffers, outputs, len(rows) + 1)
    inlined = _inlined(members, local, buffers)
    riding = _riding(members, inlined, buffers)
    modes = {s.index: row_modes(shapes, s, assumed) for s in members
             if isinstance(s.node.op, Elemwise)}
    return RowGroup(members, rows, local, inlined, riding, modes)


def _row_locals(members, steps, buffers, outputs, ndim: int) -> dict:
    """{buffer: 'row' | 'value'} for the buffers a group both writes and alone reads."""
    inside = {s.index for s in members}
    used_outside = set(outputs)
    for step in steps:
        if step.index not in inside:
            used_outside.update(step.inputs)
    local = {}
    for step in members:
        for b in step.outputs:
            var = buffers[b].var
            if (b in used_outside or buffers[b].view_of is not None or var.ndim != ndim
                    or all(d == 1 for d in var.type.shape[:-1])):
                continue
            local[b] = "value" if var.type.shape[-1] == 1 else "row"
    changed = True
    while changed:  # an inplace output shares its input's storage: both local or neither
        changed = False
        for step in members:
            for b in step.outputs:
                t = buffers[b].takes_over
                if t is not None and (b in local) != (t in local):
                    local.pop(b, None)
                    local.pop(t, None)
                    changed = True
    return local


def _inlined(members, local, buffers) -> dict:
    """{elementwise step index: reduce step index} for the elementwise steps whose one output
    only the next reduction over it reads."""
    readers: dict[int, list] = {}
    for step in members:
        for b in step.inputs:
            readers.setdefault(b, []).append(step)
    out = {}
    for pos, step in enumerate(members):
        if not isinstance(step.node.op, Elemwise) or len(step.outputs) != 1:
            continue
        b = step.outputs[0]
        users = readers.get(b, [])
        if local.get(b) != "row" or len(users) != 1 or not is_row_reduce(users[0].node):
            continue
        reduce = users[0]
        between = members[pos + 1:members.index(reduce)]
        if any(buffers[o].takes_over in step.inputs for s in between for o in s.outputs):
            continue  # an input is overwritten before the reduction would read it
        out[step.index] = reduce.index
    return out


def _riding(members, inlined, buffers) -> dict:
    """{reduce step index: elementwise step index} for the reductions over an elementwise
    output that other steps read too."""
    out = {}
    for pos, step in enumerate(members):
        if not is_row_reduce(step.node):
            continue
        x = step.inputs[0]
        k = next((k for k, e in enumerate(members[:pos]) if x in e.outputs), None)
        if k is None:
            continue
        producer = members[k]
        if (producer.index in inlined or not isinstance(producer.node.op, Elemwise)
                or len(producer.outputs) != 1
                or producer.node.outputs[0].type.shape[-1] == 1):
            continue
        between = members[k + 1:pos]
        if any(buffers[o].takes_over == x for s in between for o in s.outputs):
            continue  # overwritten before the reduction would read it
        out[step.index] = producer.index
    return out
