"""Loops: how a Scan step runs, decided once here for every backend (and printed).

A Scan step is one loop whose body is the step's sub-program emitted inline, in the loop:
no call, no tuple and no allocation per step. Two decisions say how values cross iterations:

- registers: a 0-d state lives in locals across steps, a window of its last k values
  (k = -min(taps)) the body reads as scalars; its trace, where one is kept, gets one element
  per step.
- direct outputs: a state, or a collected (nit-sot) output whose trace is allocated before the
  loop, whose body output is a temporary of the sub-program (fresh storage: not a body input,
  a constant or an inplace result, and overwritten by no later body step), or a view keeping
  its element order of one (a product's (1, n) result seen as its n-vector), is computed
  straight into its row of the outer buffer; the others are copied into their rows once the
  body has run.
- in place: a state the body updates in place (its previous value, dead after the step,
  overwritten by an inplace op: Scan.overwritable_inputs) lives in one row, read and written
  by every step, with no copy.
"""

from __future__ import annotations

from dataclasses import dataclass

from verglas.ops.basic import DimShuffle
from verglas.ops.scan import Scan
from verglas.ops.scan.row_shapes import row_shapes

__all__ = ["Loop", "plan_loop", "body_input_names"]


@dataclass(frozen=True)
class Loop:
    """How one Scan step's loop runs (see the module docstring)."""

    registers: tuple[int, ...] = ()  # states (layout order) carried in registers
    direct: tuple[int, ...] = ()  # outputs (layout order) the body computes into their rows
    # (output, rows): outputs holding only their last entries (layout `keep`) that the loop
    # writes into a ring of at most that many rows (a state: the entries kept and those its
    # taps read; a 0-d state none when its window holds every entry kept)
    rings: tuple[tuple[int, int], ...] = ()
    in_place: tuple[int, ...] = ()  # states the body updates in place, in one row
    # (output, body buffer): a direct output that is a view of the buffer computed in its row
    into: tuple[tuple[int, int], ...] = ()

    def describe(self, buffer_names, n_states: int) -> list[str]:
        """One line per decision; states are named `state<q> (<its outer buffer's name>)`,
        collected outputs `output<o>` (`buffer_names`: the outer buffers of the outputs)."""
        def states(qs):
            return ", ".join(f"state{q} ({buffer_names[q]})" for q in qs)
        lines = []
        if self.registers:
            lines.append(f"in registers across steps: {states(self.registers)}")
        if self.direct:
            lines.append("computed straight into their rows: " + ", ".join(
                f"state{o} ({buffer_names[o]})" if o < n_states
                else f"output{o} ({buffer_names[o]})" for o in self.direct))
        if self.in_place:
            lines.append(f"updated in place: {states(self.in_place)}")
        if self.rings:
            lines.append("rings of " + ", ".join(f"{rows} rows for {buffer_names[o]}"
                                                 for o, rows in self.rings))
        return lines


def body_input_names(layout) -> tuple[str, ...]:
    """Names of a Scan body's inputs by role, for printing: seq0[t+1], state1[t-2], nonseq0."""
    names = [f"seq{j}[t+{o}]" for j, offs in enumerate(layout.seq_offsets) for o in offs]
    names += [f"state{q}[t{tap}]" for q, taps in enumerate(layout.state_taps) for tap in taps]
    return tuple(names + [f"nonseq{w}" for w in range(layout.n_non_seqs)])


def plan_loop(op, sub) -> Loop | None:
    """The Loop of a Scan op (None for other ops) whose body was lowered to `sub`."""
    if not isinstance(op, Scan):
        return None
    layout = op.layout
    registers = tuple(q for q, t in enumerate(op.state_types) if t.ndim == 0)
    overwritten = {b.takes_over for b in sub.buffers if b.takes_over is not None}
    producer = {b: step for step in sub.steps for b in step.outputs}
    # steps whose outputs get no storage of their own through the memory plan
    elsewhere = set(sub.adopted) | {k for r in sub.repeats for k in range(r.first, r.last_step + 1)}
    local = {b for g in sub.groups for b in g.local}
    bases = [_storage_of(sub, b) for b in sub.outputs]
    direct, into = [], []
    for o in range(layout.n_outputs):
        if o in registers or not op.inner_output_types[o].ndim or (
                o >= layout.n_states and not _collected_before_the_loop(op, o)):
            continue
        bid = _row_target(sub, sub.outputs[o], producer)
        if bid is None or bases.count(bases[o]) != 1:
            continue
        buf, step = sub.buffers[bid], producer[bid]
        if (buf.kind != "temp" or buf.takes_over is not None or bid in overwritten
                or bid in local or step.index in elsewhere
                or step.node.op.inner_graph is not None or step.node.op.runs_inline
                or step.node.op.reads_shape_only):
            continue
        direct.append(o)
        if bid != sub.outputs[o]:
            into.append((o, bid))
    lengths = layout.mit_sot_lengths + (1,) * layout.n_sit_sot
    in_place = tuple(q for q in range(layout.n_states) if q not in registers
                     and op.groups[layout.n_seqs + q][0] in op.overwritable_inputs
                     and _storage_of(sub, sub.outputs[q])
                     == sub.inputs[op.groups[layout.n_seqs + q][0]])
    rings = []
    for o in range(layout.n_outputs):
        kept = layout.kept(o)
        if kept is None:
            continue
        if o >= layout.n_states:
            rings.append((o, kept))
        elif o in in_place:
            rings.append((o, 1))
        elif o not in registers:
            rings.append((o, max(kept, lengths[o] + 1)))
        elif kept > lengths[o]:
            rings.append((o, kept))
    return Loop(registers, tuple(direct), tuple(rings), in_place, tuple(into))


def _collected_before_the_loop(op, o: int) -> bool:
    """Whether collected output `o` has all its entries kept in a trace whose rows' shape the
    inputs' lengths give, allocated before the loop (the CPU's Scan: else the first step's
    row makes it)."""
    i = o - op.layout.n_states
    t = op.inner_output_types[o]
    rows = row_shapes(op)[i]
    return op.layout.kept(o) is None and all(
        s is not None or e is not None for s, e in zip(t.shape, rows))


def _row_target(sub, bid: int, producer) -> int | None:
    """The buffer computed in output `bid`'s row: `bid`, or the temporary it is a view of
    through DimShuffles that keep the elements' order (only length-1 axes added or dropped),
    None through other views."""
    while sub.buffers[bid].view_of is not None:
        step = producer.get(bid)
        op = step.node.op if step is not None else None
        if not isinstance(op, DimShuffle) or list(op.kept) != sorted(op.kept):
            return None
        bid = sub.buffers[bid].view_of
    return bid if bid in producer else None


def _storage_of(program, bid: int) -> int:
    """The buffer whose storage buffer `bid` lives in (through views and inplace results)."""
    buf = program.buffers[bid]
    while buf.view_of is not None or buf.takes_over is not None:
        buf = program.buffers[buf.view_of if buf.view_of is not None else buf.takes_over]
    return buf.id
