"""Program: what the scheduler hands to every backend — steps, buffers, aliasing, a memory plan.

A Program is immutable and prints one line per step. Buffer shapes are symbolic: each
dimension is a variable of one frozen "shape graph" whose inputs are the program's inputs, so
two buffers of the same size share the very same size variable (hash-consing).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from verglas.ops.elemwise import Elemwise
from verglas.ops.reduce import Reduce
from verglas.schedule.loops import Loop
from verglas.schedule.repeats import Repeat

__all__ = ["Buffer", "Step", "Program", "is_metadata_step", "is_inline_step", "SHARE_MIN_USES"]

SHARE_MIN_USES = 2  # an op that many loop steps run is one kernel, compiled once, called by each


def is_metadata_step(step) -> bool:
    """Steps that only read shapes or build views: no kernel runs."""
    op = step.node.op
    return op.reads_shape_only or bool(op.view_map)


def is_inline_step(step) -> bool:
    """Steps that compute a few scalars in place: elementwise ops on 0-d values and the ops
    that say so (MakeVector): no loop of their own."""
    op = step.node.op
    return op.runs_inline or (isinstance(op, Elemwise)
                              and all(v.ndim == 0 for v in step.node.outputs))


@dataclass(frozen=True, eq=False)
class Buffer:
    """One array value of the program."""

    id: int
    var: object  # the frozen graph variable it holds
    dtype: str
    ndim: int
    kind: str  # "input" | "constant" | "temp"
    view_of: int | None = None  # buffer whose storage this one views (view_map)
    takes_over: int | None = None  # buffer whose storage this one overwrites (destroy_map)
    is_output: bool = False

    @property
    def itemsize(self) -> int:
        return np.dtype(self.dtype).itemsize


@dataclass(frozen=True, eq=False)
class Step:
    """One node to run: reads buffers `inputs`, writes buffers `outputs`."""

    index: int
    node: object
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    sub_program: Program | None = None  # inner-graph ops: lowered once per distinct op
    # (input position, index): the step reads one element of buffer inputs[position] at
    # those constant indices (an a[3] folded into the elementwise step that reads it)
    element_reads: tuple = ()
    loop: Loop | None = None  # a Scan step: how its loop runs (loops.py)

    def element_index(self, i: int) -> tuple | None:
        """The constant index input `i` reads one element at, or None (it reads a buffer)."""
        for position, index in self.element_reads:
            if position == i:
                return index
        return None


def shared_ops(steps, elsewhere) -> dict:
    """{op: how many steps run it} for the elementwise (over arrays) and reduction (over
    matrices and up) ops that SHARE_MIN_USES or more steps run outside `elsewhere` (the steps
    whose code is a row group's, a fused map's or a repeat's): see Program.shared_kernels."""
    uses: dict = {}
    for s in steps:  # loops over arrays (a 0-d step is a few inline statements)
        op = s.node.op
        looped = (isinstance(op, Elemwise) and s.node.outputs[0].ndim >= 1) or (
            isinstance(op, Reduce) and s.node.inputs[0].ndim >= 2)
        if looped and s.index not in elsewhere:
            uses[op] = uses.get(op, 0) + 1
    return {op: n for op, n in uses.items() if n >= SHARE_MIN_USES}


@dataclass(frozen=True, eq=False)
class Program:
    """The scheduled form of a frozen graph, shared by the CPU and CUDA backends."""

    graph: object
    buffers: tuple[Buffer, ...]
    steps: tuple[Step, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    shapes: object  # verglas.schedule.shapes.ShapeTable
    live: tuple[tuple[int, int], ...] = ()  # per buffer: (first step, last step)
    slots: tuple[int | None, ...] = ()  # per buffer: storage slot (None: input/const/view)
    slot_specs: tuple[tuple[str, object], ...] = ()  # per slot: (dtype, size variable)
    input_names: tuple[str, ...] = field(default=())
    groups: tuple = ()  # RowGroups (rowgroups.py): consecutive steps that run as one loop
    repeats: tuple = ()  # Repeats (repeats.py): runs of identical blocks that run as one loop
    # "specialized" (no broadcasting at run time; checked at broadcast_checks) or "general":
    # see variants.py
    variant: str = "specialized"
    broadcast_checks: tuple[int, ...] = ()
    adopted: frozenset = frozenset()  # SumToShape steps whose result is their input's array
    # (reduction step, elementwise step): the reduction computes it in its loop (reduce_maps.py)
    reduce_maps: tuple[tuple[int, int], ...] = ()
    # the general variant's ((field, value), ...) where they differ (empty: the same): the
    # specialized variant's row groups may hold checked steps, and its plan share a slot
    # between sizes only its checks make equal (lower.py: groups, reduce_maps, live, slots,
    # slot_specs, repeats)
    general_plan: tuple = ()
    # (step index, eighths of a work unit per element): the loops a thread pool shares out
    # when large, a row group's under its first step (pools.py)
    pooled: tuple[tuple[int, int], ...] = ()

    def with_input_names(self, names) -> Program:
        """This Program with `names` for its inputs when printing (self when they are its own):
        a Program loaded from a cache takes its caller's names."""
        names = tuple(names)
        if names == self.input_names:
            return self
        return replace(self, input_names=names, shapes=self.shapes.with_input_names(names))

    def general(self) -> Program:
        """The general variant: any dim may broadcast at run time (variants.py)."""
        return replace(self, variant="general", adopted=frozenset(), general_plan=(),
                       **dict(self.general_plan))

    def buffer_of(self, var) -> Buffer:
        return self.buffers[self._index[var]]

    def storage_of(self, b: int) -> Buffer:
        """The buffer whose storage buffer `b` uses (through views and inplace results)."""
        buf = self.buffers[b]
        while buf.view_of is not None or buf.takes_over is not None:
            buf = self.buffers[buf.view_of if buf.view_of is not None else buf.takes_over]
        return buf

    def returned_copies(self) -> tuple[int, ...]:
        """The outputs a call returns as copies: those whose storage is not theirs to give (an
        input's or a constant's, the workspace's, another output's). The others own their
        storage, a slot allocated afresh by every call (one holding an output: itself, the
        temporary it was computed over in place, or the temporary it is a view of where the
        plan gives that away, lower.py `_given_views`) and are returned as they are."""
        slots = self.slots or ()
        fresh = {slots[b.id] for b in self.buffers if b.is_output and slots
                 and slots[b.id] is not None}
        copies, seen = [], set()
        for b in self.outputs:
            base = self.storage_of(b)
            owned = base.kind == "temp" and base.id not in seen and (
                base.id == b or (slots and slots[base.id] in fresh))
            if not owned:
                copies.append(b)
            seen.add(base.id)
        return tuple(copies)

    def __post_init__(self):
        object.__setattr__(self, "_index", {b.var: b.id for b in self.buffers})
        grouped = {s.index for g in self.groups for s in g.steps}
        # a repeat's later iterations run the body's code again: no code of their own
        grouped |= {k for r in self.repeats for k in range(r.first + r.period, r.last_step + 1)}
        grouped |= {k for pair in self.reduce_maps for k in pair}  # (code of their own)
        object.__setattr__(self, "_shared", shared_ops(self.steps, grouped))

    def pool_work(self, index: int) -> int | None:
        """Eighths of a work unit per element of the loop of step `index` (a row group's
        first) when a thread pool may share it out, else None (pools.py)."""
        return dict(self.pooled).get(index)

    def shared_kernels(self) -> dict:
        """{op: its steps} for the elementwise (over arrays) and reduction (over matrices and up)
        ops that SHARE_MIN_USES or more steps outside row groups run (a repeat's body counted
        once): each such op is one kernel, compiled once and called by every step (compile time
        then follows the distinct ops, not the program's size)."""
        return dict(self._shared)

    # -- measurement ---------------------------------------------------------------------------
    def buffer_shapes(self, input_shapes) -> list[tuple[int, ...] | None]:
        """Concrete shape of every buffer for the given input shapes (None: value-dependent)."""
        return self.shapes.evaluate(input_shapes)

    def peak_bytes(self, input_shapes) -> int:
        """Bytes of intermediate and output storage a call needs, computed without running.

        Storage slots of the memory plan are counted once each (reused buffers share one), and
        the outputs returned as copies (`returned_copies`); inputs and constants are not, nor
        the copies a backend makes of operands it cannot read as they are (a matrix product's
        operand with negative strides). Raises ValueError when a buffer's size depends on
        input values rather than shapes.
        """
        shapes = self.buffer_shapes(input_shapes)
        slot_bytes: dict[int, int] = {}
        for buf, slot in zip(self.buffers, self.slots):
            if slot is None:
                continue
            shape = shapes[buf.id]
            if shape is None:
                raise ValueError(f"peak_bytes: the shape of buffer b{buf.id} ({buf.var}) "
                                 f"depends on input values")
            nbytes = int(np.prod(shape, dtype=np.int64)) * buf.itemsize
            slot_bytes[slot] = max(slot_bytes.get(slot, 0), nbytes)
        copies = sum(int(np.prod(shapes[b], dtype=np.int64)) * self.buffers[b].itemsize
                     for b in self.returned_copies() if shapes[b] is not None)
        return sum(slot_bytes.values()) + self._ring_bytes(shapes) + copies

    def _ring_bytes(self, shapes) -> int:
        """The rings loops write their kept outputs' entries into (loops.py), at most."""
        total = 0
        for step in self.steps:
            for o, rows in (step.loop.rings if step.loop is not None else ()):
                shape = shapes[step.outputs[o]]
                if shape is None:
                    raise ValueError(f"peak_bytes: the shape of buffer b{step.outputs[o]} "
                                     f"depends on input values")
                row = int(np.prod(shape[1:], dtype=np.int64))
                total += rows * row * self.buffers[step.outputs[o]].itemsize
        return total

    def units(self):
        """What runs, in order: each step, a row group's members as one RowGroup, a repeated
        run of blocks as one Repeat."""
        starts = {g.first: g for g in self.groups}
        starts.update((r.first, r) for r in self.repeats)
        k = 0
        while k < len(self.steps):
            unit = starts.get(k)
            if unit is None:
                yield self.steps[k]
                k += 1
            else:
                yield unit
                k = (unit.last_step if isinstance(unit, Repeat) else unit.last) + 1

    def repeat_body(self, repeat: Repeat) -> tuple[Step, ...]:
        """The steps one iteration of `repeat` runs (its first block)."""
        return self.steps[repeat.first:repeat.first + repeat.period]

    def producer_in(self, reduction: int) -> Step | None:
        """The elementwise step the reduction step `reduction` computes in its loop."""
        for r, p in self.reduce_maps:
            if r == reduction:
                return self.steps[p]
        return None

    def runs_work(self, step: Step) -> bool:
        """Whether `step` is a loop or a kernel of its own: not a view or shape read, not a
        few inline scalar statements, not a result that takes its input's array, not an
        elementwise step a reduction computes."""
        return not (is_metadata_step(step) or is_inline_step(step)
                    or step.index in self.adopted
                    or any(p == step.index for _, p in self.reduce_maps))

    def n_kernels(self) -> int:
        """Loops or kernels in the program's code: the steps that run work, a row group
        counting once, a repeat's body once."""
        def count(units):
            return sum(count(self.repeat_body(u)) if isinstance(u, Repeat) else
                       (not isinstance(u, Step) or self.runs_work(u)) for u in units)
        return count(self.units())

    # -- printing ------------------------------------------------------------------------------
    def buffer_str(self, bid: int) -> str:
        buf = self.buffers[bid]
        if buf.kind == "input":
            name = self.input_names[self.inputs.index(bid)] if self.input_names else f"in{bid}"
            return name
        return f"b{bid}"

    def __str__(self):
        lines = [f"Program: {len(self.steps)} steps, {len(self.buffers)} buffers, "
                 f"{len(self.slot_specs)} storage slots"]
        for b in self.inputs:
            buf = self.buffers[b]
            lines.append(f"  in   {self.buffer_str(b)}: {buf.dtype}{self.shapes.shape_str(b)}")
        for unit in self.units():
            if isinstance(unit, Step):
                lines.append(f"  {unit.index:3d}  {self._step_str(unit)}")
                if unit.loop is not None:
                    lines.extend(self._loop_lines(unit))
                continue
            if isinstance(unit, Repeat):
                body = self.repeat_body(unit)
                carried = ", ".join(f"{self.buffer_str(x)} then {self.buffer_str(y)}"
                                    for x, y in unit.carried)
                shifted = ", ".join(f"{self.buffer_str(a)}[i] at i + {d} per iteration"
                                    for a, d in unit.shifted)
                reads = "; ".join(r for r in (carried and f"reading {carried}", shifted) if r)
                lines.append(f"  {unit.first:3d}-{unit.last_step}  one loop of {unit.count} "
                             f"iterations of steps {body[0].index}-{body[-1].index}"
                             + (f" ({reads})" if reads else "") + ":")
                for step in body:
                    lines.append(f"       {step.index:3d}  {self._step_str(step)}")
                ends = ", ".join(f"{self.buffer_str(last)} = {self.buffer_str(b0)}"
                                 for b0, last in unit.last if last in self._read_later(unit))
                lines.append(f"       steps {unit.first + unit.period}-{unit.last_step}: "
                             f"iterations 2-{unit.count}" + (f"; after it {ends}" if ends else ""))
                continue
            lines.append(f"  {unit.first:3d}-{unit.last}  one loop over "
                         f"{' * '.join(self.shapes.dim_str(d) for d in unit.rows)} rows"
                         f"{self._pool_str(unit.first)}:")
            for step in unit.steps:
                lines.append(f"       {step.index:3d}  {self._step_str(step, unit)}")
        lines.append("  out  " + ", ".join(self.buffer_str(b) for b in self.outputs))
        if self.variant == "general":
            lines.append("  variant: general (any dim may broadcast at run time)")
        elif self.broadcast_checks:
            lines.append(f"  variant: specialized; steps "
                         f"{', '.join(map(str, self.broadcast_checks))} check that nothing "
                         f"broadcasts at run time (else the general variant runs)")
        for k, (op, n) in enumerate(self._shared.items()):
            lines.append(f"  k{k}   one kernel for the {n} steps of {op}")
        return "\n".join(lines)

    def _loop_lines(self, step: Step) -> list[str]:
        """A Scan step's loop: its decisions (loops.py), then its body's steps, indented."""
        op, loop = step.node.op, step.loop
        names = [self.buffer_str(b) for b in step.outputs[:op.layout.n_outputs]]
        lines = [f"       one loop of {self.buffer_str(step.inputs[0])} steps, the body inline"
                 + "".join(f"; {d}" for d in loop.describe(names, op.layout.n_states)) + ":"]
        body = str(step.sub_program).split("\n")[1:]
        lines.extend(f"       | {line.strip() if line.startswith('  in ') else line[2:]}"
                     for line in body)
        return lines

    def _read_later(self, repeat: Repeat) -> set[int]:
        """Buffers of `repeat`'s last block that later steps or the outputs read."""
        later = {b for s in self.steps[repeat.last_step + 1:] for b in s.inputs}
        return later | set(self.outputs)

    def _step_str(self, step, group=None) -> str:
        """`outputs = op(inputs)`, with each output's storage: a view, inplace, a slot, or
        inside a row `group` one row or one value per row (and where an elementwise step is
        computed in a reduction's loop, or a reduction in its producer's)."""
        outs = []
        for b in step.outputs:
            buf = self.buffers[b]
            if buf.view_of is not None:
                mark = f" view({self.buffer_str(buf.view_of)})"
            elif buf.takes_over is not None:
                mark = f" inplace({self.buffer_str(buf.takes_over)})"
            elif group is not None and b in group.local:
                mark = f" [one {group.local[b]}]"
            elif step.index in self.adopted:
                mark = f" ({self.buffer_str(step.inputs[0])}'s array)"
            elif self.slots and self.slots[b] is not None:
                mark = f" @s{self.slots[b]}"
            else:
                mark = ""
            outs.append(f"{self.buffer_str(b)}: {buf.dtype}{self.shapes.shape_str(b)}{mark}")
        ins = []
        for i, b in enumerate(step.inputs):
            name = self.buffer_str(b) if self.buffers[b].kind != "constant" else f"c{b}"
            index = step.element_index(i)
            ins.append(name if index is None else f"{name}[{', '.join(map(str, index))}]")
        ins = ", ".join(ins)
        sub = " [sub-program]" if step.sub_program is not None else ""
        if step.node.op in self._shared and group is None:
            sub += f"  [kernel k{list(self._shared).index(step.node.op)}]"
        where = ""
        fused = [r for r, p in self.reduce_maps if p == step.index]
        if fused:
            where = f"  (in the loop of {fused[0]})"
        elif group is not None and step.index in group.inlined:
            where = f"  (in the loop of {group.inlined[step.index]})"
        elif group is not None and step.index in group.riding:
            where = f"  (in the loop of {group.riding[step.index]})"
        pool = self._pool_str(step.index) if group is None else ""
        return f"{', '.join(outs)} = {step.node.op}({ins}){sub}{where}{pool}"

    def _pool_str(self, index: int) -> str:
        """How the pool may share out step `index`'s loop (pools.py), or ''."""
        work = self.pool_work(index)
        return "" if work is None else f"  [pooled when large: {work / 8:g} work per element]"
