"""Where a generated CPU function keeps its temporaries: the memory plan's slots as arrays
(in a workspace kept across calls, or allocated afresh), and the arrays a step may take over
from its input instead of copying (`adopt`)."""

from __future__ import annotations

import math

from verglas.cpu_backend.dimfacts import DimFacts, tuple_items
from verglas.cpu_backend.dtypes import np_dtype
from verglas.cpu_backend.intrinsics import c_view, empty_expr, ws_carve, ws_take
from verglas.source import tuple_expr

__all__ = ["BLOCK_MIN_BYTES", "Storage"]


# the bytes below which an output gets no block: malloc serves it from its free lists, and a
# block's checks would cost more than they save (see runtime.OutputBlocks)
BLOCK_MIN_BYTES = 1 << 16


def _small(buf) -> bool:
    """Whether buffer `buf` is always smaller than BLOCK_MIN_BYTES (its static shape)."""
    shape = buf.var.type.shape
    return None not in shape and math.prod(shape) * buf.itemsize < BLOCK_MIN_BYTES


class Storage:
    """Where temporaries live: the memory plan's slots, each one array reused by later buffers
    of its dtype and size (see schedule/memory.py).

    With a `workspace`, slots that never hold a program output are carved from the byte array
    `ws` the runner keeps across calls, so a steady state allocates only its outputs. A slot
    whose shape DimFacts can write in the inputs' lengths is reserved at the function's top
    (ws_add, then ws_reserve: one allocation when `ws` is too small) and carved without a
    check (ws_carve, the least code per site); the others are taken where they come (ws_take,
    a new array when `ws` is full; `wo` counts the bytes the next call should have).

    An output allocated at the function's top is carved likewise from a byte array `ob<k>` of
    its own, one the runner recycles once nothing holds an earlier call's output there, and
    returned `on<k>` gives the bytes it needs (see runtime.OutputBlocks): a steady state then writes
    its outputs into memory it wrote before, not into new pages.
    """

    def __init__(self, program, names, src, workspace: bool = False,
                 parent: Storage | None = None):
        self.program, self.names, self.src, self.em = program, names, src, src.emitter
        # slot -> (array, its shape expr, whether the array is new: one an output may take)
        self.slot_storage: dict[int, tuple[str, str, bool]] = {}
        slots = program.slots or ()
        # (a loop body's outputs are copied into their rows, or computed there, before the
        # next iteration takes the same workspace again: they need no array of their own)
        self.output_slots = set() if parent is not None else {
            slots[b.id] for b in program.buffers
            if b.is_output and slots and slots[b.id] is not None}
        self.workspace = workspace
        # the function's storage (a loop body's shares its workspace, reservations and flags)
        self.root = self if parent is None else parent.root
        self.used_workspace = False  # whether the code reads `ws` (the root's)
        self.takes = 0  # how many arrays are taken from it as they come (ws_take; the root's)
        # (block, bytes needed) names of the outputs carved from recycled blocks (the root's)
        self.blocks: list[tuple[str, str]] = [] if parent is None else parent.blocks
        # (shape in the inputs' lengths, dtype) of each array carved at offset `wq<k>`
        self.reserved: list[tuple[str, str]] = [] if parent is None else parent.reserved
        # a loop body's outputs computed straight into rows: buffer -> (row expr, message,
        # whether the buffer is one an output views, the row seen in its shape)
        self.destinations: dict[int, tuple[str, str, bool]] = {}
        self.directed: set[int] = set()  # the buffers that were
        # buffer -> the slot whose array it took without swapping slots (adopt): a SumToShape
        # of it takes that array in turn (a loop body's chain of identity sums of its output)
        self.array_slot: dict[int, int] = {}
        self.in_rows: set[int] = set()  # buffers whose array is a loop output's row

    def alloc(self, bid: int, shape_expr: str) -> str:
        """Emit the allocation of buffer `bid` with tuple expression `shape_expr`."""
        buf = self.program.buffers[bid]
        out = self.names[bid]
        # facts learned here hold below (see dimfacts.py)
        at_top = self.em.depth == self.src.straight_depth
        facts = self.src.facts if at_top else DimFacts()
        if buf.takes_over is not None:  # inplace: write into the destroyed input's storage
            self.em.line(f"{out} = {self.names[buf.takes_over]}")
            facts.same_shape(out, self.names[buf.takes_over], buf.ndim)
            return out
        dims = tuple_items(shape_expr) if shape_expr else None
        if dims is not None and len(dims) != buf.ndim:
            dims = None
        if bid in self.destinations:  # a loop body's output, computed into its row
            row, message, viewed = self.destinations[bid]
            self.em.line(f"{out} = {row}")
            if viewed:  # (the array an output views: the row seen in its shape)
                shape, lengths = shape_expr, dims
                if dims is None:
                    shape = self.em.fresh("sh")
                    self.em.line(f"{shape} = {shape_expr}")
                    lengths = [f"{shape}[{d}]" for d in range(buf.ndim)]
                todo = [(f"{out}.size", " * ".join(f"({d})" for d in lengths))]
            else:
                pairs = ([(f"{out}.shape[{d}]", e) for d, e in enumerate(dims)]
                         if dims is not None else [(f"{out}.shape", shape_expr)])
                todo = self.src.facts.unproven(pairs) if dims is not None else pairs
            if todo:
                self.em.line(f"if {' or '.join(f'{a} != {b}' for a, b in todo)}:")
                with self.em.indent():
                    self.em.line(f"raise ValueError({message!r})")
            if viewed:
                self.em.line(f"{out} = {self.src.add_global('view', c_view)}({out}, {shape})")
            if dims is not None:
                facts.shape_is(out, dims)
            self.directed.add(bid)
            self.in_rows.add(bid)
            return out
        # the shape in the inputs' lengths, if known: then the function's top reserves it
        forms = [facts.input_form(d) for d in dims] if dims is not None and at_top else None
        if dims is not None:
            facts.shape_is(out, dims)
        slot = self.program.slots[bid] if self.program.slots else None
        if slot is None or slot not in self.slot_storage:
            new = slot is None or not self.workspace or slot in self.output_slots
            dtype = np_dtype(buf.dtype)
            if (new and slot in self.output_slots and self.workspace and self.em.depth == 1
                    and not _small(buf)):
                # an output at the function's top: carved from the block `ob<k>` the runner
                # recycles once no earlier output holds it (see runtime.OutputBlocks)
                block, need = self.em.fresh("ob"), self.em.fresh("on")
                self.blocks.append((block, need))
                take = self.src.add_global("ws_take", ws_take)
                self.em.line(f"{out}, {need} = {take}({block}, 0, {shape_expr}, {dtype})")
            elif new:
                self.em.line(f"{out} = {empty_expr(self.src, shape_expr, buf.dtype)}")
            elif forms is not None and None not in forms:
                carve = self.src.add_global("ws_carve", ws_carve)
                self.em.line(f"{out} = {carve}(ws, wq{len(self.reserved)}, {shape_expr}, "
                             f"{dtype})")
                self.reserved.append((tuple_expr(forms), dtype))
                self.root.used_workspace = True
            else:  # a size known only here (it depends on values): taken as it comes
                take = self.src.add_global("ws_take", ws_take)
                self.em.line(f"{out}, wo = {take}(ws, wo, {shape_expr}, {dtype})")
                self.root.used_workspace = True
                self.root.takes += 1
            if slot is not None:
                self.slot_storage[slot] = (out, shape_expr, new)
        else:  # reuse the storage of a dead buffer of the same dtype and size
            storage, storage_shape, _ = self.slot_storage[slot]
            if shape_expr == storage_shape:  # (names are never rebound: the same shape)
                self.em.line(f"{out} = {storage}")
            else:
                view = self.src.add_global("view", c_view)
                self.em.line(f"{out} = {view}({storage}, {shape_expr})")
        return out

    def adopt(self, bid: int, source: int, step: int) -> str | None:
        """Make buffer `bid` (an output of `step`) the array of buffer `source` instead of a
        copy of it; the caller guarantees equal shapes and that `step` writes nothing.

        Allowed when neither is destroyed while the other still needs the array, and neither
        is a program output sharing it with another. If `bid` outlives `source`, the two slots
        swap arrays: later buffers of `bid`'s slot (which start after `bid` dies) get
        `source`'s, those of `source`'s slot the other one (or a new one); a slot holding a
        program output takes only a new array, never the workspace's. Returns the name, or
        None where the memory plan does not allow it.
        """
        program, slots, live = self.program, self.program.slots, self.program.live
        if slots and slots[bid] is None and program.buffers[bid].kind == "temp" \
                and step in program.adopted:
            return self._alias(bid, source)  # the plan shares the array (lower._identity_sums)
        if source in self.in_rows:  # (an output's row, kept past the step: never swapped)
            if any(b.takes_over in (bid, source) for b in program.buffers
                   if b.takes_over is not None and live[b.id][0] > step):
                return None
            self.in_rows.add(bid)
            return self._alias(bid, source)
        if not slots or slots[bid] is None or slots[source] is None:
            return None
        s_in, s_out = self.array_slot.get(source, slots[source]), slots[bid]
        buffers = program.buffers
        # (a loop body's outputs are copied out by the loop: they need no arrays of their own)
        owned = self.root is self
        if (s_in not in self.slot_storage or (owned and buffers[source].is_output)
                or buffers[bid].dtype != buffers[source].dtype):
            return None  # (its array is a view of an input, or returned as it is)
        # when the array of `source` is last needed (its inplace results share its slot)
        end = max(live[b][1] for b, slot in enumerate(slots)
                  if slot == s_in and live[b][0] <= step)
        destroyed = {b.takes_over for b in buffers if b.takes_over is not None
                     and live[b.id][0] > step}
        if end > step and (source in destroyed or bid in destroyed
                           or (owned and buffers[bid].is_output)):
            return None
        if live[bid][1] > end:
            if self.src.repeats:
                return None  # (in a repeat's loop every iteration must find the same arrays)
            array = self.slot_storage[s_in]
            previous = self.slot_storage.get(s_out)
            if (s_out in self.output_slots and not array[2]) or (
                    previous is not None and s_in in self.output_slots and not previous[2]):
                return None
            del self.slot_storage[s_in]
            self.slot_storage[s_out] = array
            if previous is not None:
                self.slot_storage[s_in] = previous
        elif s_in != s_out:
            self.array_slot[bid] = s_in
        return self._alias(bid, source)

    def _alias(self, bid: int, source: int) -> str:
        out = self.names[bid]
        self.em.line(f"{out} = {self.names[source]}")
        if self.em.depth == self.src.straight_depth:
            self.src.facts.same_shape(out, self.names[source], self.program.buffers[bid].ndim)
        return out
