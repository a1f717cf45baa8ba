"""A Scan node taken apart for a loop rewrite, and put back together.

`ScanParts(node)` lists the node's outer inputs and its body's inner variables by role, the body
rebuilt on fresh inner inputs (mutable variables a rewrite may replace or add to); `build()`
makes the new Scan node and pairs each old outer output still there with its new one. A rewrite
changes the lists (adds a sequence, a non-sequence or a nit-sot output, replaces inner values)
and never edits the old op: inner graphs are immutable values.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from verglas.graph.basic import Variable
from verglas.graph.traversal import ancestors, graph_replace, toposort
from verglas.ops.batching import substitute
from verglas.ops.indexing import getitem
from verglas.ops.math import add
from verglas.ops.op_from_graph import rebuild_graph
from verglas.ops.scan import Scan, ScanLayout

__all__ = ["ScanParts", "Seq", "State", "NitSot", "NonSeq"]


@dataclass(eq=False)
class Seq:
    outer: Variable
    offsets: list[int]
    inner: list[Variable]  # one per offset


@dataclass(eq=False)
class State:
    init: Variable
    taps: list[int]
    inner: list[Variable]  # one per tap
    out: Variable  # the body's new value
    keep: int | None
    old: Variable | None  # the node's outer output it was (None: new)
    mit: bool


@dataclass(eq=False)
class NitSot:
    out: Variable
    keep: int | None
    old: Variable | None


@dataclass(eq=False)
class NonSeq:
    outer: Variable
    inner: Variable


@dataclass(eq=False)
class ScanParts:
    """The parts of a Scan node (see the module docstring)."""

    n_steps: Variable
    seqs: list[Seq] = field(default_factory=list)
    states: list[State] = field(default_factory=list)  # mit-sots first, then sit-sots
    nits: list[NitSot] = field(default_factory=list)
    non_seqs: list[NonSeq] = field(default_factory=list)
    until: Variable | None = None  # the body's stopping condition, if it has one
    backwards: bool = False  # the layout's: the steps go over the sequences last to first

    @classmethod
    def of(cls, node) -> ScanParts:
        op, lay = node.op, node.op.layout
        fresh = [t.make_variable() for t in op.inner_input_types]
        outs = rebuild_graph(op.fgraph, fresh)
        groups = op.groups
        parts = cls(node.inputs[0], backwards=lay.backwards)
        n_seqs, n_states = lay.n_seqs, lay.n_states
        for j, offs in enumerate(lay.seq_offsets):
            parts.seqs.append(Seq(node.inputs[1 + j], list(offs), [fresh[g] for g in groups[j]]))
        for q, taps in enumerate(lay.state_taps):
            parts.states.append(State(node.inputs[1 + n_seqs + q], list(taps),
                                      [fresh[g] for g in groups[n_seqs + q]], outs[q],
                                      lay.kept(q), node.outputs[q], q < lay.n_mit_sot))
        for i in range(lay.n_nit_sot):
            o = n_states + i
            parts.nits.append(NitSot(outs[o], lay.kept(o), node.outputs[o]))
        for w in range(lay.n_non_seqs):
            j = 1 + n_seqs + n_states + w
            parts.non_seqs.append(NonSeq(node.inputs[j], fresh[groups[j - 1][0]]))
        if lay.until:
            parts.until = outs[-1]
        return parts

    # -- reading ----------------------------------------------------------------------------------
    def inner_inputs(self) -> list[Variable]:
        return ([v for s in self.seqs for v in s.inner] + [v for s in self.states for v in s.inner]
                + [w.inner for w in self.non_seqs])

    def inner_outputs(self) -> list[Variable]:
        """The states' new values, the nit-sots, then the stopping condition if any."""
        return ([s.out for s in self.states] + [o.out for o in self.nits]
                + ([self.until] if self.until is not None else []))

    def state_dependent(self) -> set:
        """The inner variables whose value depends on a state (read through its taps)."""
        found = {v for s in self.states for v in s.inner}
        for node in _body_nodes(self):
            if any(i in found for i in node.inputs):
                found.update(node.outputs)
        return found

    def sequence_windows(self) -> dict:
        """{inner sequence variable: the outer rows it takes, step by step (a window of the
        outer sequence, one row per step)}."""
        n = self.n_steps
        return {v: getitem(s.outer, slice(o, add(n, o)) if o else slice(None, n))
                for s in self.seqs for o, v in zip(s.offsets, s.inner)}

    def outer_of(self) -> dict:
        """{inner non-sequence variable: its outer variable}."""
        return {w.inner: w.outer for w in self.non_seqs}

    # -- changing ---------------------------------------------------------------------------------
    def replace_inner(self, replace: dict, loose: bool = False) -> None:
        """Swap inner variables for others in every inner output (`loose`: of other types,
        the ops rebuilt by their make_node)."""
        outs = (substitute if loose else graph_replace)(self.inner_outputs(), replace)
        for s, new in zip(self.states, outs):
            s.out = new
        for o, new in zip(self.nits, outs[len(self.states):]):
            o.out = new
        if self.until is not None:
            self.until = outs[-1]

    def add_sequence(self, outer: Variable, like: Variable) -> Variable:
        """A new sequence read at offset 0, standing for inner values like `like` (of its
        type); returns its inner variable."""
        inner = like.type.make_variable()
        self.seqs.append(Seq(outer, [0], [inner]))
        return inner

    def collect(self, value: Variable) -> NitSot:
        """The nit-sot output collecting `value` at every step: one already there, else a new
        one (two push-outs that need one factor share its collection)."""
        for nit in self.nits:
            if nit.out is value and nit.keep is None:
                return nit
        nit = NitSot(value, None, None)
        self.nits.append(nit)
        return nit

    def add_non_sequence(self, outer: Variable, like: Variable) -> Variable:
        """A new non-sequence standing for inner values like `like`; its inner variable."""
        inner = like.type.make_variable()
        self.non_seqs.append(NonSeq(outer, inner))
        return inner

    # -- putting back together -----------------------------------------------------------------
    def build(self) -> tuple[object, list[tuple[Variable, Variable]]]:
        """(the new Scan node, [(old outer output, new outer output)] for the outputs that were
        the node's); inputs the body no longer reads are dropped."""
        self._drop_unread()
        mit = [s for s in self.states if s.mit]
        sit = [s for s in self.states if not s.mit]
        self.states = mit + sit
        keep = tuple(s.keep for s in self.states) + tuple(o.keep for o in self.nits)
        layout = ScanLayout(
            seq_offsets=tuple(tuple(s.offsets) for s in self.seqs),
            mit_sot_taps=tuple(tuple(s.taps) for s in mit),
            n_sit_sot=len(sit), n_nit_sot=len(self.nits), n_non_seqs=len(self.non_seqs),
            keep=keep if any(k is not None for k in keep) else (), until=self.until is not None,
            backwards=self.backwards)
        op = Scan(self.inner_inputs(), self.inner_outputs(), layout)
        node = op.make_node(self.n_steps, *[s.outer for s in self.seqs],
                            *[s.init for s in self.states], *[w.outer for w in self.non_seqs])
        olds = [s.old for s in self.states] + [o.old for o in self.nits]
        return node, [(old, new) for old, new in zip(olds, node.outputs) if old is not None]

    def _drop_unread(self) -> None:
        """Sequence offsets and non-sequences no inner output reads."""
        read = set(ancestors(self.inner_outputs(), set(self.inner_inputs())))
        for s in self.seqs:
            kept = [(o, v) for o, v in zip(s.offsets, s.inner) if v in read]
            s.offsets, s.inner = [o for o, _ in kept], [v for _, v in kept]
        self.seqs = [s for s in self.seqs if s.inner]
        self.non_seqs = [w for w in self.non_seqs if w.inner in read]


def _body_nodes(parts: ScanParts) -> list:
    return toposort(parts.inner_outputs(), parts.inner_inputs())
