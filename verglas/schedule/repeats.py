"""Repeats: a run of K identical blocks of steps that runs as one loop of K iterations.

A program built by a Python loop (ten rounds of `x = tanh(x) + max(x)`, a stack of identical
layers) lowers to the same few steps over and over. Emitted one by one, every block costs
numba's compile time again (typing and lowering grow with the statements of a function);
emitted as a loop, the program's code is as long as one block. The scheduler decides it here,
so every backend and `print(f.program)` see the same loop.

Blocks B_0 ... B_{K-1} (K >= MIN_REPEATS, each of `period` consecutive steps, none in a row
group or a reduction of a map) repeat when, position by position:
- the steps run the very same op (ops are interned) with the same element reads;
- every input is one of: a buffer of the same block at the same position; a buffer from before
  the run, the same in every block (invariant); for B_k (k >= 1), B_{k-1}'s output at a
  fixed position where B_0 reads an outer buffer X (carried: X in the first iteration, the
  previous iteration's output after); or one-element inputs or constants of one dtype and
  rank, one per block (varying: the coefficients of a sum of terms, read by iteration); or an
  element read a[i] of an outer 1-d array whose index steps by the same d >= 0 from block to
  block, for every read of that array in the block (shifted: the body reads a[i] of a[d*k:]);
- corresponding outputs have the same dtype, rank, kind, memory slot and aliasing (so one
  block's storage plan serves every iteration; outputs of OpFromGraph steps, arrays their
  sub-program's function returns, use no slot);
- nothing after the run reads a buffer of B_0 ... B_{K-2}, and none is a program output.
Carried buffers are arrays (rank >= 1) of one shape that own their storage, X as well as the
output, so one loop variable of one type holds them all; where the shapes are not known equal,
only OpFromGraph steps may read X (their functions check what they are given: a stack of
layers of one OpFromGraph is one call site, whatever broadcasting its shapes leave open).
"""

from __future__ import annotations

from dataclasses import dataclass

from verglas.ops.basic import DimShuffle
from verglas.ops.elemwise import Elemwise
from verglas.ops.op_from_graph import OpFromGraph

__all__ = ["Repeat", "repeats", "MIN_REPEATS", "MAX_PERIOD"]

MIN_REPEATS = 3  # fewer blocks stay as they are
MIN_SAVED = 6  # nor runs that would save fewer steps than this
MAX_PERIOD = 48  # steps in one block at most


@dataclass(frozen=True, eq=False)
class Repeat:
    """Steps first .. first + period * count - 1 that run as `count` iterations of the first
    `period` steps (the body)."""

    first: int
    period: int
    count: int
    # (outer buffer X that B_0 reads, B_0's output that the next iteration reads in its place)
    carried: tuple[tuple[int, int], ...]
    # B_0's buffer -> the last block's (its values after the loop are the last iteration's)
    last: tuple[tuple[int, int], ...]
    # (body step position, input position, the buffer each block reads there)
    varying: tuple[tuple[int, int, tuple[int, ...]], ...] = ()
    # (1-d array, d): the body's element reads of it step by d per iteration
    shifted: tuple[tuple[int, int], ...] = ()
    # carried X whose replacement's shape is not known equal to X's (see the module doc)
    unproven: tuple[int, ...] = ()

    @property
    def last_step(self) -> int:
        return self.first + self.period * self.count - 1

    @property
    def index(self) -> int:
        return self.first


def repeats(steps, buffers, outputs, slots, shapes, excluded=frozenset()) -> list[Repeat]:
    """The repeats of a program's steps, greedily from the first step, each the period that
    saves the most steps; `excluded` steps (a row group's, a fused reduction's) repeat not."""
    finder = _Finder(steps, buffers, outputs, slots, shapes, excluded)
    found = []
    s = 0
    while s < len(steps):
        best = None
        for p in range(1, min(MAX_PERIOD, (len(steps) - s) // MIN_REPEATS) + 1):
            rep = finder.longest(s, p)
            if rep is not None and (best is None or (rep.count - 1) * p > (best.count - 1)
                                    * best.period):
                best = rep
        if best is not None and (best.count - 1) * best.period >= MIN_SAVED:
            found.append(best)
            s = best.last_step + 1
        else:
            s += 1
    return found


class _Finder:
    def __init__(self, steps, buffers, outputs, slots, shapes, excluded):
        self.steps, self.buffers, self.slots, self.shapes = steps, buffers, slots, shapes
        self.outputs = set(outputs)
        # arrays called sub-programs' functions return: no memory slot holds them
        self.called = {b for s in steps if isinstance(s.node.op, OpFromGraph) for b in s.outputs}
        self.producer = {b: (s.index, o) for s in steps for o, b in enumerate(s.outputs)}
        self.last_read: dict[int, int] = {}
        for s in steps:
            for b in s.inputs:
                self.last_read[b] = s.index
        # steps that cannot repeat get a signature of their own
        # (element reads by position: their indices may move from block to block)
        self.sig = [(s.node.op, tuple(i for i, _ in s.element_reads), len(s.inputs))
                    if s.index not in excluded else ("excluded", s.index) for s in steps]

    def longest(self, s: int, p: int) -> Repeat | None:
        """The longest run of blocks of period `p` from step `s`, None under MIN_REPEATS."""
        steps, sig = self.steps, self.sig
        n = len(steps)
        if any(sig[s + j] != sig[s + p + j] or sig[s + j] != sig[s + 2 * p + j]
               for j in range(p)):
            return None  # (the cheap test first)
        carried: dict[int, tuple[int, int]] = {}  # X -> (position, output) in the block
        varying: dict[tuple[int, int], list[int]] = {}  # (position, input) -> buffer per block
        shifts: dict[int, int] = {}  # array -> its element reads' step per block
        k = 1
        while s + (k + 1) * p <= n and all(sig[s + j] == sig[s + k * p + j] for j in range(p)):
            more = {pos: list(bs) for pos, bs in varying.items()}
            more_shifts = dict(shifts)
            if not (self._block_matches(s, p, k, carried, more, more_shifts)
                    and self._internal(s, p, k - 1)):
                break
            varying, shifts = more, more_shifts
            k += 1
        if k < MIN_REPEATS or not self._varies_alike(s, p, varying) or not self._shifted_alone(
                s, p, shifts):
            return None
        x_of = {pos: x for x, pos in carried.items()}
        carried_pairs = tuple((x, steps[s + j].outputs[o]) for (j, o), x in sorted(x_of.items()))
        unproven = tuple(x for x, y in carried_pairs if not self._same_shape(x, y))
        last = tuple((b0, steps[s + (k - 1) * p + j].outputs[o])
                     for j in range(p) for o, b0 in enumerate(steps[s + j].outputs))
        return Repeat(s, p, k, carried_pairs, last,
                      tuple((j, i, tuple(bs)) for (j, i), bs in sorted(varying.items())),
                      tuple(sorted((a, d) for a, d in shifts.items() if d)), unproven)

    def _role(self, b: int, s: int, p: int, k: int):
        """What buffer `b`, read by block k, is to the run: ("outer", b), ("own", j, o),
        ("prev", j, o), or None (a block before the previous one)."""
        at = self.producer.get(b)
        if at is None or at[0] < s:
            return ("outer", b)
        block, j = divmod(at[0] - s, p)
        if block == k:
            return ("own", j, at[1])
        if block == k - 1:
            return ("prev", j, at[1])
        return None

    def _block_matches(self, s: int, p: int, k: int, carried: dict, varying: dict,
                       shifts: dict) -> bool:
        """Block k reads and writes as block 0 does (recording carried buffers when k == 1,
        in `varying` what block k reads at varying positions, in `shifts` how far element
        reads move per block)."""
        steps, buffers, slots = self.steps, self.buffers, self.slots
        for j in range(p):
            first, step = steps[s + j], steps[s + k * p + j]
            for i, (b0, b) in enumerate(zip(first.inputs, step.inputs)):
                e0 = first.element_index(i)
                if e0 is not None:  # (the signatures matched: block k reads one too)
                    e = step.element_index(i)
                    d, rem = divmod(e[0] - e0[0], k) if len(e0) == 1 else (0, 1)
                    if (b != b0 or self._role(b0, s, p, 0)[0] != "outer" or rem or d < 0
                            or e0[0] < 0 or shifts.setdefault(b0, d) != d):
                        return False
                    continue
                r0, r = self._role(b0, s, p, 0), self._role(b, s, p, k)
                if r is None or r0 is None:
                    return False
                if r[0] == "prev":
                    if r0[0] != "outer" or not self._carriable(b0, b, s, p):
                        return False
                    if k == 1:  # (what the body carries is settled by the first two blocks)
                        carried.setdefault(b0, r[1:])
                    if carried.get(b0) != r[1:]:
                        return False
                elif r[0] == "outer" and b in carried:
                    return False
                elif (j, i) in varying or (r0[0] == r[0] == "outer" and b != b0):
                    if not self._may_vary(first, i, b):
                        return False
                    varying.setdefault((j, i), [b0] * k).append(b)
                elif r != r0:
                    return False
            for b0, b in zip(first.outputs, step.outputs):
                u0, u = buffers[b0], buffers[b]
                if (u.dtype, u.ndim, u.kind) != (u0.dtype, u0.ndim, u0.kind) or (
                        slots and b not in self.called and slots[b] != slots[b0]):
                    return False
                for a0, a in ((u0.view_of, u.view_of), (u0.takes_over, u.takes_over)):
                    if (a0 is None) != (a is None):
                        return False
                    if a is not None and not self._same_role(a0, a, s, p, k, carried) and not any(
                            jj == j and bs[0] == a0 and bs[k] == a
                            for (jj, _), bs in varying.items()):
                        return False  # (a view of a varying input varies alike)
        return all(x not in carried or self._reads_as_carried(x, s, p)
                   for x in {b for j in range(p) for b in steps[s + j].inputs})

    def _same_role(self, a0, a, s, p, k, carried) -> bool:
        r0, r = self._role(a0, s, p, 0), self._role(a, s, p, k)
        if r is None or r0 is None:
            return False
        if r[0] == "prev":
            return r0[0] == "outer" and carried.get(a0) == r[1:]
        return r == r0

    def _may_vary(self, step, i: int, b: int) -> bool:
        """One-element inputs or constants of one type that an elementwise step (or the
        broadcast of a 0-d one) reads as scalars: read by iteration."""
        u0, u = self.buffers[step.inputs[i]], self.buffers[b]
        op = step.node.op
        scalar_use = isinstance(op, Elemwise) or (
            isinstance(op, DimShuffle) and u0.ndim == 0 and not op.dropped)
        return (scalar_use and step.element_index(i) is None
                and u0.kind == u.kind and u.kind in ("input", "constant")
                and (u0.dtype, u0.ndim) == (u.dtype, u.ndim)
                and all(d == 1 for d in u0.var.type.shape)
                and all(d == 1 for d in u.var.type.shape))

    def _varies_alike(self, s: int, p: int, varying: dict) -> bool:
        """A buffer varying at one position of the body varies alike wherever the body reads
        it (one name per buffer serves every iteration)."""
        seen: dict[int, list[int]] = {}
        for j in range(p):
            for i, b0 in enumerate(self.steps[s + j].inputs):
                bs = varying.get((j, i))
                if b0 in seen and seen[b0] != bs:
                    return False
                seen[b0] = bs
        return True

    def _shifted_alone(self, s: int, p: int, shifts: dict) -> bool:
        """An array whose element reads move is read by the body through element reads only
        (one name, the moved view, serves them all)."""
        moved = {a for a, d in shifts.items() if d}
        return all(self.steps[s + j].element_index(i) is not None
                   for j in range(p) for i, b in enumerate(self.steps[s + j].inputs)
                   if b in moved)

    def _reads_as_carried(self, x: int, s: int, p: int) -> bool:
        """Block 1 reads the carried value wherever block 0 reads X (one name serves both)."""
        steps = self.steps
        for j in range(p):
            for b0, b in zip(steps[s + j].inputs, steps[s + p + j].inputs):
                if b0 == x and self._role(b, s, p, 1)[0] != "prev":
                    return False
        return True

    def _carriable(self, x: int, y: int, s: int, p: int) -> bool:
        """X and the output replacing it are arrays of one type that own their storage, of
        one (symbolic) shape or read by OpFromGraph steps only."""
        bx, by = self.buffers[x], self.buffers[y]
        return (bx.dtype == by.dtype and bx.ndim == by.ndim and bx.ndim >= 1
                and bx.view_of is None and by.view_of is None
                and bx.kind in ("temp", "input") and by.kind == "temp"
                and (self._same_shape(x, y) or all(
                    isinstance(step.node.op, OpFromGraph)
                    for step in self.steps[s:s + p] if x in step.inputs)))

    def _same_shape(self, x: int, y: int) -> bool:
        return all(a is b for a, b in zip(self.shapes.dims_of(x), self.shapes.dims_of(y)))

    def _internal(self, s: int, p: int, k: int) -> bool:
        """Nothing after block k + 1 reads block k's buffers, and none is an output."""
        end = s + (k + 2) * p - 1
        for j in range(p):
            for b in self.steps[s + k * p + j].outputs:
                if b in self.outputs or self.last_read.get(b, -1) > end:
                    return False
        return True
