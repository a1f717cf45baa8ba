"""The Scan op: a loop whose body is a frozen inner graph, with its tap layout as props.

Outer inputs: `[n_steps, *sequences, *mit_sot_initials, *sit_sot_initials, *non_sequences]`.
Inner inputs: each sequence's slices (one per offset), each mit-sot's taps, each sit-sot's
previous value, then the non-sequences. Inner outputs: the new mit-sot, sit-sot and nit-sot
values, in that order. Outer outputs: the mit-sot and sit-sot buffers (initial values first,
then one entry per step: PyTensor's layout) and the nit-sot traces (one entry per step).

`scan_buffers` builds a Scan from a Python step function, and the gradient of a Scan is a
backward Scan built the same way, so the op, its builder and its gradient live here together.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from verglas.graph.basic import Apply, Constant, Variable
from verglas.graph.frozen import FrozenFunctionGraph, freeze
from verglas.graph.op import Op
from verglas.graph.traversal import ancestors, graph_replace, toposort
from verglas.graph.types import TensorType
from verglas.ops.autodiff import vjp
from verglas.ops.basic import DimShuffle, ShapeI, as_tensor, constant, shape_i, stack
from verglas.ops.elemwise import Elemwise
from verglas.ops.indexing import IncSubtensor, inc_subtensor
from verglas.ops.math import add, cast, minimum, neq, sub, zeros_like
from verglas.ops.op_from_graph import connection_pattern, infer_shapes, rebuild_graph, run_inner
from verglas.ops.scalar import Second
from verglas.ops.scan.row_shapes import evaluate, row_shapes

__all__ = ["Scan", "ScanLayout", "scan_buffers", "until", "without_unused_outputs", "SIT_SOT",
           "MIT_SOT", "NIT_SOT"]


class ScanLayout(NamedTuple):
    """Where each inner input and output of a Scan belongs; immutable and hashable.

    `seq_offsets[j]`: step t reads `sequence_j[t + o]` for each o (non-negative, in order).
    `mit_sot_taps[m]`: step t reads `state_m[t + tap]` for each tap (negative, in order); the
    mit-sot's initial value holds the `-min(taps)` entries before step 0.
    """

    seq_offsets: tuple[tuple[int, ...], ...] = ()
    mit_sot_taps: tuple[tuple[int, ...], ...] = ()
    n_sit_sot: int = 0
    n_nit_sot: int = 0
    n_non_seqs: int = 0
    # per outer output, how many of its last entries it holds (None: all); () keeps all of
    # every output (see `kept`; the scan_save_mem rewrite sets it)
    keep: tuple[int | None, ...] = ()
    # whether the body has one more output, a 0-d bool: the loop stops after the first step
    # where it is true (n_steps, the first outer input, is then the most steps it runs)
    until: bool = False
    # whether step t works on sequence row n - 1 - t and writes nit-sot row n - 1 - t (states
    # still follow the steps): a gradient's loop, which visits the forward steps last to first
    # and so reads every forward trace and writes every sequence gradient in its own order,
    # no reversed view between them
    backwards: bool = False

    def kept(self, o: int) -> int | None:
        """How many of outer output `o`'s last entries it holds (None: all of them)."""
        return self.keep[o] if self.keep else None

    @property
    def n_seqs(self) -> int:
        return len(self.seq_offsets)

    @property
    def n_mit_sot(self) -> int:
        return len(self.mit_sot_taps)

    @property
    def n_states(self) -> int:
        """mit-sot plus sit-sot: the outputs fed back into the loop."""
        return self.n_mit_sot + self.n_sit_sot

    @property
    def n_outputs(self) -> int:
        return self.n_states + self.n_nit_sot

    @property
    def mit_sot_lengths(self) -> tuple[int, ...]:
        """Leading length of each mit-sot's initial value."""
        return tuple(-min(taps) for taps in self.mit_sot_taps)

    @property
    def state_taps(self) -> tuple[tuple[int, ...], ...]:
        """Taps of every state: mit-sot taps, then (-1,) per sit-sot."""
        return self.mit_sot_taps + ((-1,),) * self.n_sit_sot

    @property
    def n_inner_inputs(self) -> int:
        return (sum(map(len, self.seq_offsets)) + sum(map(len, self.mit_sot_taps))
                + self.n_sit_sot + self.n_non_seqs)

    @property
    def n_outer_inputs(self) -> int:
        return 1 + self.n_seqs + self.n_states + self.n_non_seqs

    def inner_input_groups(self) -> tuple[tuple[int, ...], ...]:
        """Inner input positions per outer input after n_steps (sequences, states, non-seqs)."""
        groups, k = [], 0
        for size in ([len(o) for o in self.seq_offsets] + [len(t) for t in self.state_taps]
                     + [1] * self.n_non_seqs):
            groups.append(tuple(range(k, k + size)))
            k += size
        return tuple(groups)

    def check(self) -> None:
        """Raise ValueError when the layout is inconsistent."""
        for offs in self.seq_offsets:
            if not offs or min(offs) < 0 or len(set(offs)) != len(offs):
                raise ValueError(f"ScanLayout: sequence offsets {offs} must be distinct and >= 0")
        for taps in self.mit_sot_taps:
            if not taps or max(taps) >= 0 or len(set(taps)) != len(taps):
                raise ValueError(f"ScanLayout: mit-sot taps {taps} must be distinct and < 0")
        if min(self.n_sit_sot, self.n_nit_sot, self.n_non_seqs) < 0:
            raise ValueError("ScanLayout: negative count")
        if self.keep and (len(self.keep) != self.n_outputs or any(
                m is not None and (not isinstance(m, int) or m < 1) for m in self.keep)):
            raise ValueError(f"ScanLayout: keep {self.keep} must give None or a positive int "
                             f"per output ({self.n_outputs})")
        if self.backwards and (self.until or any(self.kept(o) is not None for o in range(
                self.n_states, self.n_outputs))):
            raise ValueError("ScanLayout: a loop that runs backwards neither stops early nor "
                             "keeps only some rows of a nit-sot")


def _shape_str(shape) -> str:
    inner = ", ".join("?" if s is None else str(s) for s in shape)
    return f"({inner},)" if len(shape) == 1 else f"({inner})"


def _kept_length(full: int | None, kept: int | None, floor: int) -> int | None:
    """The static leading length of an output of `full` entries (None: unknown) holding its
    last `kept` (None: all), where `full` is at least `floor` whatever the steps."""
    if kept is None:
        return full
    if full is not None:
        return min(full, kept)
    return kept if kept <= floor else None


class Scan(Op):
    """A loop over a frozen inner graph: sequences, mit-sot / sit-sot / nit-sot outputs and
    non-sequences, run for `n_steps` steps (the first outer input)."""

    __props__ = ("fgraph", "layout")

    def __init__(self, inputs, outputs, layout: ScanLayout):
        self._setup(freeze(list(inputs), list(outputs)), ScanLayout(*layout))

    @classmethod
    def from_graph(cls, fgraph: FrozenFunctionGraph, layout: ScanLayout) -> Scan:
        """The Scan of an already frozen inner graph."""
        op = cls.__new__(cls)
        op._setup(fgraph, ScanLayout(*layout))
        return op

    def _setup(self, fgraph: FrozenFunctionGraph, layout: ScanLayout):
        # Everything the op needs from its inner graph is derived here, once.
        layout.check()
        if len(fgraph.inputs) != layout.n_inner_inputs:
            raise ValueError(f"Scan: the inner graph has {len(fgraph.inputs)} inputs, the "
                             f"layout needs {layout.n_inner_inputs}")
        if len(fgraph.outputs) != layout.n_outputs + layout.until:
            raise ValueError(f"Scan: the inner graph has {len(fgraph.outputs)} outputs, the "
                             f"layout needs {layout.n_outputs + layout.until}")
        if layout.until and (fgraph.outputs[-1].ndim != 0
                             or fgraph.outputs[-1].dtype != "bool"):
            raise TypeError(f"Scan: the stopping condition must be a 0-d bool, got "
                            f"{fgraph.outputs[-1].type}")
        self.fgraph = fgraph
        self.layout = layout
        self.inner_input_types = tuple(v.type for v in fgraph.inputs)
        self.inner_output_types = tuple(v.type for v in fgraph.outputs)
        self.groups = layout.inner_input_groups()
        self.connection_pattern = connection_pattern(fgraph)
        n_seqs = layout.n_seqs
        # the type of one state entry: what its taps read and what each step must produce
        self.state_types = tuple(self.inner_input_types[self.groups[n_seqs + q][0]]
                                 for q in range(layout.n_states))
        for q, (st, out) in enumerate(zip(self.state_types, self.inner_output_types)):
            if st.dtype != out.dtype or st.ndim != out.ndim:
                raise TypeError(f"Scan: state output {q} has type {out}, its taps read {st}")
            for g in self.groups[n_seqs + q]:
                if self.inner_input_types[g] != st:
                    raise TypeError(f"Scan: the taps of state {q} have different types")

    @property
    def inner_graph(self) -> FrozenFunctionGraph:
        return self.fgraph

    @property
    def overwritable_inputs(self) -> tuple[int, ...]:
        """Inner input positions the body may overwrite (inplace): the previous value of a
        sit-sot of which the op keeps the last entry only, which nothing reads after the step
        (the loop then keeps one row for it, updated in place)."""
        lay = self.layout
        return tuple(self.groups[lay.n_seqs + q][0] for q in range(lay.n_mit_sot, lay.n_states)
                     if lay.kept(q) == 1)

    def replace(self, **changes) -> Scan:
        """This op with `fgraph` and/or `layout` changed (self when nothing changes)."""
        fgraph = changes.pop("fgraph", self.fgraph)
        layout = ScanLayout(*changes.pop("layout", self.layout))
        if changes:
            raise TypeError(f"Scan.replace: unknown props {sorted(changes)}")
        if fgraph is self.fgraph and layout == self.layout:
            return self
        return Scan.from_graph(fgraph, layout)

    def __repr__(self):
        lay = self.layout
        parts = [f"seqs={lay.n_seqs}"] if lay.n_seqs else []
        if lay.n_mit_sot:
            parts.append(f"mit_sot={list(map(list, lay.mit_sot_taps))}")
        for name in ("n_sit_sot", "n_nit_sot", "n_non_seqs"):
            if getattr(lay, name):
                parts.append(f"{name[2:]}={getattr(lay, name)}")
        if lay.keep:
            parts.append("keep=[" + ", ".join("all" if m is None else str(m)
                                              for m in lay.keep) + "]")
        if lay.until:
            parts.append("until")
        if lay.backwards:
            parts.append("backwards")
        return f"Scan{{{', '.join(parts)}, {len(self.fgraph.toposort())} nodes}}"

    def __getstate__(self):
        state = super().__getstate__()
        state.pop("_runner", None)
        return state

    # -- building ------------------------------------------------------------------------------
    def outer_output_types(self, n_static: int | None) -> list[TensorType]:
        """The outer output types when the number of steps is `n_static` (None: unknown)."""
        lay = self.layout
        types = []
        lengths = lay.mit_sot_lengths + (1,) * lay.n_sit_sot
        for q, (st, k) in enumerate(zip(self.state_types, lengths)):
            full = None if n_static is None else k + n_static
            types.append(TensorType(st.dtype, (_kept_length(full, lay.kept(q), k),
                                               *st.shape)))
        for i, t in enumerate(self.inner_output_types[lay.n_states:lay.n_outputs]):
            types.append(TensorType(t.dtype, (_kept_length(n_static, lay.kept(lay.n_states + i),
                                                           0), *t.shape)))
        return types

    def make_node(self, n_steps, *inputs):
        lay = self.layout
        if len(inputs) + 1 != lay.n_outer_inputs:
            raise TypeError(f"{self}: expected {lay.n_outer_inputs} inputs (n_steps first), "
                            f"got {len(inputs) + 1}")
        n_steps = as_tensor(n_steps)
        if n_steps.ndim != 0 or np.dtype(n_steps.dtype).kind not in "iu":
            raise TypeError(f"{self}: n_steps must be a 0-d integer, got {n_steps.type}")
        if n_steps.dtype != "int64":
            n_steps = cast(n_steps, "int64")
        inputs = [as_tensor(x) for x in inputs]
        types = self.inner_input_types
        n_seqs, lengths = lay.n_seqs, lay.mit_sot_lengths
        for j, group in enumerate(self.groups):
            x, want = inputs[j], types[group[0]]
            if j < n_seqs:
                what, lead = f"sequence {j}", True
            elif j < n_seqs + lay.n_mit_sot:
                m = j - n_seqs
                what, lead = f"mit-sot initial value {m}", True
                if x.ndim >= 1 and x.type.shape[0] not in (None, lengths[m]):
                    raise ValueError(f"{self}: {what} has leading length {x.type.shape[0]}, "
                                     f"its taps need {lengths[m]}")
            elif j < n_seqs + lay.n_states:
                what, lead = f"sit-sot initial value {j - n_seqs - lay.n_mit_sot}", False
            else:
                what, lead = f"non-sequence {j - n_seqs - lay.n_states}", False
            got = TensorType(x.dtype, x.type.shape[1:]) if lead and x.ndim else x.type
            if (lead and x.ndim == 0) or not (got == want or want.is_super(got)):
                expect = _shape_str((None, *want.shape) if lead else want.shape)
                raise TypeError(f"{self}: {what} has type {x.type}, expected {want.dtype} of "
                                f"shape {expect}")
        # (a loop that may stop early runs a number of steps known only when it has run)
        n_static = (int(n_steps.data) if isinstance(n_steps, Constant) and not lay.until
                    else None)
        return Apply(self, [n_steps, *inputs], self.outer_output_types(n_static))

    # -- running -------------------------------------------------------------------------------
    def perform(self, node, inputs, outputs):
        results = self.run_loop(inputs[0], inputs[1:], lambda args: run_inner(self, args),
                                empty=lambda shape, dtype: np.empty(shape, dtype),
                                truth=bool, copy=np.copy)
        for storage, value in zip(outputs, results):
            storage[0] = value

    def run_loop(self, n, inputs, body, empty, truth, copy) -> list:
        """The outputs of the loop over `n` steps of `body(step inputs) -> step outputs` on
        the outer `inputs` (sequences, initial states, non-sequences), in buffers from
        `empty(shape, dtype)`: perform runs it on numpy arrays and the reference body; the
        CUDA backend on device arrays and its body's kernels (`truth` reads the stopping
        condition, `copy` makes a kept tail an array of its own)."""
        lay = self.layout
        n = int(n)
        if n < 0:
            raise ValueError(f"{self}: n_steps is {n}, it must be >= 0")
        n_seqs, n_states = lay.n_seqs, lay.n_states
        seqs = inputs[:n_seqs]
        inits = inputs[n_seqs:n_seqs + n_states]
        non_seqs = list(inputs[n_seqs + n_states:])
        for j, (seq, offs) in enumerate(zip(seqs, lay.seq_offsets)):
            if seq.shape[0] < n + max(offs):
                raise ValueError(f"{self}: sequence {j} has length {seq.shape[0]}, but {n} "
                                 f"steps reading offsets {list(offs)} need {n + max(offs)}")
        lengths = lay.mit_sot_lengths + (1,) * lay.n_sit_sot
        buffers = []
        for q, (init, k, st) in enumerate(zip(inits, lengths, self.state_types)):
            if q < lay.n_mit_sot:
                if init.shape[0] != k:
                    raise ValueError(f"{self}: mit-sot initial value {q} has leading length "
                                     f"{init.shape[0]}, its taps need {k}")
                buf = empty((k + n, *init.shape[1:]), st.dtype)
                buf[:k] = init
            else:
                buf = empty((1 + n, *init.shape), st.dtype)
                buf[0] = init
            buffers.append(buf)
        nit_types = self.inner_output_types[n_states:lay.n_outputs]
        traces: list = [None] * lay.n_nit_sot
        state_taps = lay.state_taps
        ran = n  # the steps that ran
        for t in range(n):
            row = n - 1 - t if lay.backwards else t  # (the sequence and nit-sot row)
            args = [seq[row + o, ...] for seq, offs in zip(seqs, lay.seq_offsets) for o in offs]
            for buf, k, taps in zip(buffers, lengths, state_taps):
                args.extend(buf[k + t + tap, ...] for tap in taps)
            results = body(args + non_seqs)
            for q, (buf, k) in enumerate(zip(buffers, lengths)):
                value = results[q]
                if value.shape != buf.shape[1:]:
                    raise ValueError(f"{self}: at step {t}, state output {q} has shape "
                                     f"{value.shape}, its previous value has {buf.shape[1:]}")
                buf[k + t] = value
            for i, value in enumerate(results[n_states:lay.n_outputs]):
                if traces[i] is None:
                    traces[i] = empty((n, *value.shape), nit_types[i].dtype)
                elif value.shape != traces[i].shape[1:]:
                    raise ValueError(f"{self}: at step {t}, nit-sot output {i} has shape "
                                     f"{value.shape}, earlier steps gave {traces[i].shape[1:]}")
                traces[i][row] = value
            if lay.until and truth(results[-1]):
                ran = t + 1
                break
        for i, (t, rows) in enumerate(zip(nit_types, row_shapes(self))):
            if traces[i] is None:  # no step ran: rows of the shape the inputs' lengths give
                shape = [s if s is not None else 0 if e is None else
                         evaluate(e, lambda j, axis: inputs[j].shape[axis])
                         for s, e in zip(t.shape, rows)]
                traces[i] = empty((0, *shape), t.dtype)
        if ran < n:  # the loop stopped early: the entries of the steps that ran
            buffers = [buf[:k + ran] for buf, k in zip(buffers, lengths)]
            traces = [tr[:ran] for tr in traces]
        return [value if lay.kept(o) is None else copy(value[-lay.kept(o):])
                for o, value in enumerate(buffers + traces)]

    def infer_shape(self, fgraph, node, input_shapes):
        lay = self.layout
        n = node.inputs[0]

        def leading(o, length):  # (a loop that may stop early: its outputs' lengths once run)
            return shape_i(node.outputs[o], 0) if lay.until else length
        n_seqs, n_states = lay.n_seqs, lay.n_states
        lengths = lay.mit_sot_lengths + (1,) * lay.n_sit_sot
        shapes = []
        for q, k in enumerate(lengths):
            init_shape = input_shapes[1 + n_seqs + q]
            state_shape = tuple(init_shape[1:]) if q < lay.n_mit_sot else tuple(init_shape)
            shapes.append((leading(q, _kept_dim(add(n, k), lay.kept(q), k)), *state_shape))
        if not lay.n_nit_sot:
            return shapes
        # nit-sot: the inner output shapes, when they depend on the inner inputs' shapes only
        placeholders = [t.make_variable() for t in self.inner_input_types]
        known = {}
        for j, group in enumerate(self.groups):
            outer_shape = tuple(input_shapes[1 + j])
            lead = j < n_seqs + lay.n_mit_sot
            for g in group:
                known[placeholders[g]] = outer_shape[1:] if lead else outer_shape
        inner_outs = rebuild_graph(self.fgraph, placeholders)[n_states:lay.n_outputs]
        inner_shapes = infer_shapes(inner_outs, known)
        inner_vars = set(placeholders)
        outer_entries = {d for s in input_shapes for d in s if isinstance(d, Variable)}
        for i, (out, shp) in enumerate(zip(inner_outs, inner_shapes)):
            outer = node.outputs[n_states + i]
            # an inner shape that reads inner values is only known at run time
            if any(v in inner_vars for v in ancestors(shp, outer_entries)):
                shp = tuple(shape_i(outer, d + 1) for d in range(out.type.ndim))
            shapes.append((leading(n_states + i, _kept_dim(n, lay.kept(n_states + i), 0)),
                           *shp))
        return shapes

    # -- gradient and pruning ------------------------------------------------------------------
    def L_op(self, inputs, outputs, output_grads):
        lay = self.layout
        if not lay.keep:
            return scan_grad(self, inputs, outputs, output_grads)
        # an op holding only the last entries of its outputs: the gradient of the full loop,
        # whose outputs' cotangents are zero but for those entries
        full = self.replace(layout=lay._replace(keep=()))
        full_outputs = full.make_node(*inputs).outputs
        grads = []
        for o, (out, g) in enumerate(zip(full_outputs, output_grads)):
            kept = lay.kept(o)
            grads.append(g if kept is None else
                         inc_subtensor(zeros_like(out)[-minimum(kept, shape_i(out, 0)):], g))
        return scan_grad(full, inputs, full_outputs, grads)

    def restrict(self, keep_outputs) -> tuple[Scan, tuple[int, ...], tuple[int, ...]] | None:
        """A Scan computing only what `keep_outputs` (outer output indices) need.

        Returns `(new_op, outer_input_indices, outer_output_indices)`: the new node takes the
        old node's inputs at those indices (n_steps first) and its outputs are the old outputs
        at those indices (a superset of `keep_outputs` when kept states feed on others).
        None when nothing can be dropped.
        """
        lay = self.layout
        n_seqs, n_states = lay.n_seqs, lay.n_states
        # (the stopping condition, an inner output after the others, is always needed)
        needed = set(keep_outputs) | ({lay.n_outputs} if lay.until else set())
        pattern = self.connection_pattern
        # a state is needed when a needed output reads one of its taps: close under that
        while True:
            grown = set(needed)
            for q in range(n_states):
                if any(pattern[g][o] for g in self.groups[n_seqs + q] for o in needed):
                    grown.add(q)
            if grown == needed:
                break
            needed = grown
        outs = sorted(needed)
        used = {i for i in range(len(pattern)) if any(pattern[i][o] for o in outs)}
        for q in outs:  # a kept state keeps all its taps (its layout stays the same)
            if q < n_states:
                used.update(self.groups[n_seqs + q])
        in_groups = [j for j, group in enumerate(self.groups)
                     if (n_seqs <= j < n_seqs + n_states and j - n_seqs in needed)
                     or (not n_seqs <= j < n_seqs + n_states and any(g in used for g in group))]
        seq_offsets = []
        for j in range(n_seqs):
            offs = tuple(o for o, g in zip(lay.seq_offsets[j], self.groups[j]) if g in used)
            if offs:
                seq_offsets.append(offs)
        inner_in = [g for j in in_groups for g in self.groups[j] if g in used]
        if len(outs) == lay.n_outputs + lay.until and len(inner_in) == lay.n_inner_inputs:
            return None
        inner_outs, outs = outs, [o for o in outs if o < lay.n_outputs]
        n_mit = lay.n_mit_sot
        new_layout = ScanLayout(
            seq_offsets=tuple(seq_offsets),
            mit_sot_taps=tuple(lay.mit_sot_taps[q] for q in outs if q < n_mit),
            n_sit_sot=sum(1 for q in outs if n_mit <= q < n_states),
            n_nit_sot=sum(1 for q in outs if q >= n_states),
            n_non_seqs=sum(1 for j in in_groups if j >= n_seqs + n_states),
            keep=tuple(lay.keep[o] for o in outs) if lay.keep else (),
            until=lay.until,
            backwards=lay.backwards,
        )
        fresh = [t.make_variable() for t in self.inner_input_types]
        new_outs = rebuild_graph(self.fgraph, fresh)
        new_op = Scan([fresh[g] for g in inner_in], [new_outs[o] for o in inner_outs],
                      new_layout)
        return new_op, (0, *(1 + j for j in in_groups)), tuple(outs)


def _kept_dim(full, kept: int | None, floor: int):
    """The symbolic leading length of an output of `full` entries holding its last `kept`."""
    if kept is None:
        return full
    return constant(kept, "int64") if kept <= floor else minimum(full, kept)


# -- building a Scan from a step function ---------------------------------------------------------
SIT_SOT, MIT_SOT, NIT_SOT = "sit-sot", "mit-sot", "nit-sot"  # the kinds of outputs_info entries


def _as_list(value) -> list:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


def _taps(value, what: str) -> tuple[int, ...]:
    taps = tuple(int(t) for t in _as_list(value))
    if not taps or len(set(taps)) != len(taps):
        raise ValueError(f"scan: {what} taps {list(taps)} must be a non-empty list of distinct "
                         f"ints")
    return taps


def _sequences(sequences) -> list[tuple[Variable, tuple[int, ...]]]:
    seqs = []
    for j, entry in enumerate(_as_list(sequences)):
        if isinstance(entry, Mapping):
            unknown = set(entry) - {"input", "taps"}
            if unknown or "input" not in entry:
                raise ValueError(f"scan: sequence {j} must be a variable or dict(input=..., "
                                 f"taps=[...]), got keys {sorted(entry)}")
            x, taps = as_tensor(entry["input"]), _taps(entry.get("taps", [0]), f"sequence {j}")
        else:
            x, taps = as_tensor(entry), (0,)
        if x.ndim == 0:
            raise ValueError(f"scan: sequence {j} is 0-d; sequences are iterated over axis 0")
        seqs.append((x, taps))
    return seqs


def _outputs_info(outputs_info) -> list[tuple[str, Variable | None, tuple[int, ...]]]:
    """(kind, initial value, taps) per entry of outputs_info."""
    infos = []
    for k, entry in enumerate(_as_list(outputs_info)):
        if isinstance(entry, Mapping):
            unknown = set(entry) - {"initial", "taps"}
            if unknown:
                raise ValueError(f"scan: outputs_info[{k}] has unknown keys {sorted(unknown)}")
            init = entry.get("initial")
            if init is None:
                infos.append((NIT_SOT, None, ()))
                continue
            taps = _taps(entry.get("taps", [-1]), f"outputs_info[{k}]")
            if max(taps) >= 0:
                raise ValueError(f"scan: outputs_info[{k}] taps {list(taps)} must be negative "
                                 f"(past values)")
            init = as_tensor(init)
            if taps == (-1,):
                infos.append((SIT_SOT, init, taps))
                continue
            if init.ndim == 0:
                raise ValueError(f"scan: outputs_info[{k}] with taps {list(taps)} needs an "
                                 f"initial value with a leading axis of length {-min(taps)}")
            n = init.type.shape[0]
            if n is not None and n != -min(taps):
                raise ValueError(f"scan: outputs_info[{k}] has an initial value of leading "
                                 f"length {n}, taps {list(taps)} need {-min(taps)}")
            infos.append((MIT_SOT, init, taps))
        elif entry is None:
            infos.append((NIT_SOT, None, ()))
        else:
            infos.append((SIT_SOT, as_tensor(entry), (-1,)))
    return infos


def _n_steps(n_steps, seqs):
    if n_steps is not None:
        if isinstance(n_steps, Variable):
            n = as_tensor(n_steps)
            if n.ndim != 0 or np.dtype(n.dtype).kind not in "iu":
                raise TypeError(f"scan: n_steps must be an int or a 0-d integer variable, got "
                                f"{n.type}")
            return n
        if isinstance(n_steps, bool) or int(n_steps) != n_steps or n_steps < 0:
            raise ValueError(f"scan: n_steps must be a non-negative int, got {n_steps!r}")
        return constant(int(n_steps), "int64")
    if not seqs:
        raise ValueError("scan: n_steps is needed when there are no sequences")
    lengths = []
    for x, taps in seqs:
        span = max(taps) - min(taps)
        static = x.type.shape[0]
        if static is not None:
            lengths.append(static - span)
        else:
            lengths.append(shape_i(x, 0) - span if span else shape_i(x, 0))
    if all(isinstance(n, int) for n in lengths):
        return constant(max(min(lengths), 0), "int64")
    n = lengths[0]
    for other in lengths[1:]:
        n = minimum(n, other)
    return n


def _join(a: TensorType, b: TensorType) -> TensorType:
    """The least specific of two types of one dtype and ndim: None where they differ."""
    return a.clone(shape=tuple(x if x == y else None for x, y in zip(a.shape, b.shape)))


def _state_entry_type(kind: str, init: Variable) -> TensorType:
    t = init.type
    return t if kind == SIT_SOT else TensorType(t.dtype, t.shape[1:])


def scan_buffers(fn, sequences=None, outputs_info=None, non_sequences=None, n_steps=None,
                 backwards: bool = False):
    """Like `scan`, but returns (the Scan's outputs in outputs_info order, with the initial
    values in front of each state's steps, and the parsed outputs_info); `backwards`: the
    layout's (step t reads sequence row n - 1 - t and writes nit-sot row n - 1 - t)."""
    seqs = _sequences(sequences)
    infos = _outputs_info(outputs_info)
    explicit_infos = outputs_info is not None
    non_seqs = [as_tensor(v) for v in _as_list(non_sequences)]
    n = _n_steps(n_steps, seqs)

    seq_vars = [[TensorType(x.dtype, x.type.shape[1:]).make_variable(_tap_name(x, "t", tap))
                 for tap in taps] for x, taps in seqs]
    state_types = [_state_entry_type(kind, init) if kind != NIT_SOT else None
                   for kind, init, _ in infos]
    # A state's type is what its initial value and every step's output have in common: start
    # from the initial value and relax it (then rebuild the step) until the step output fits.
    while True:
        state_vars = [[t.make_variable(f"{_out_name(k)}[t{tap:+d}]") for tap in taps]
                      if t is not None else [] for k, (t, (_, _, taps)) in
                      enumerate(zip(state_types, infos))]
        non_seq_vars = [v.type.make_variable(v.name) for v in non_seqs]
        args = [v for group in seq_vars for v in group]
        args += [v for group in state_vars for v in group]
        result, cond = _split_until(fn(*args, *non_seq_vars))
        outs = _step_outputs(result, infos, explicit_infos)
        if not explicit_infos:
            infos = [(NIT_SOT, None, ())] * len(outs)
            state_types = [None] * len(outs)
        relaxed = _relaxed_state_types(outs, infos, state_types)
        if relaxed == state_types:
            break
        state_types = relaxed

    # Outer variables the step function reads directly become extra non-sequences.
    placeholders = set(args) | set(non_seq_vars)
    by_outer = dict(zip(non_seqs, non_seq_vars))
    replace = {}
    outs = outs + ([cond] if cond is not None else [])  # (the condition last)
    for var in ancestors(outs, placeholders | set(non_seqs)):
        if var in placeholders or var in replace or isinstance(var, Constant):
            continue
        if var in by_outer:
            replace[var] = by_outer[var]
        elif var.owner is None:
            non_seqs.append(var)
            replace[var] = by_outer[var] = var.type.make_variable(var.name)
            non_seq_vars.append(replace[var])
    if replace:
        outs = graph_replace(outs, replace)

    mit = [k for k, (kind, _, _) in enumerate(infos) if kind == MIT_SOT]
    sit = [k for k, (kind, _, _) in enumerate(infos) if kind == SIT_SOT]
    nit = [k for k, (kind, _, _) in enumerate(infos) if kind == NIT_SOT]
    order = mit + sit + nit  # layout position -> outputs_info index
    layout = ScanLayout(
        seq_offsets=tuple(tuple(t - min(taps) for t in taps) for _, taps in seqs),
        mit_sot_taps=tuple(infos[k][2] for k in mit),
        n_sit_sot=len(sit),
        n_nit_sot=len(nit),
        n_non_seqs=len(non_seqs),
        until=cond is not None,
        backwards=backwards,
    )
    inner_inputs = [v for group in seq_vars for v in group]
    inner_inputs += [v for k in mit + sit for v in state_vars[k]]
    inner_inputs += non_seq_vars
    op = Scan(inner_inputs, [outs[k] for k in order] + outs[len(infos):], layout)
    inits = [infos[k][1] for k in mit + sit]
    results = op(n, *[x for x, _ in seqs], *inits, *non_seqs)
    results = [results] if isinstance(results, Variable) else results
    by_info: list = [None] * len(infos)
    for pos, k in enumerate(order):
        by_info[k] = results[pos]
    return by_info, infos


def _tap_name(x, prefix, tap) -> str | None:
    return f"{x.name}[{prefix}{tap:+d}]" if x.name else None


def _out_name(k: int) -> str:
    return f"out{k}"


class until:  # noqa: N801 - a marker users write as a function, as in PyTensor
    """The stopping condition of a loop: a step returns `(outputs, vg.until(cond))` and the
    loop stops after the first step whose `cond` (a 0-d value, true when nonzero) is true."""

    def __init__(self, condition):
        cond = as_tensor(condition)
        if cond.ndim != 0:
            raise ValueError(f"until: the condition must be 0-d, got shape "
                             f"{_shape_str(cond.type.shape)}")
        self.condition = cond if cond.dtype == "bool" else neq(cond, 0)

    def __repr__(self):
        return f"until({self.condition!r})"


def _split_until(result):
    """(the step's outputs, its stopping condition or None) from what a step returned."""
    if isinstance(result, until):
        raise ValueError("scan: the step function returned a stopping condition and no output")
    if isinstance(result, (list, tuple)) and result and isinstance(result[-1], until):
        outs = result[0] if len(result) == 2 else list(result[:-1])
        return outs, result[-1].condition
    if isinstance(result, (list, tuple)) and any(isinstance(r, until) for r in result):
        raise ValueError("scan: vg.until(...) must come last in what the step function returns")
    return result, None


def _step_outputs(result, infos, explicit: bool) -> list[Variable]:
    outs = list(result) if isinstance(result, (list, tuple)) else [result]
    if explicit and len(outs) != len(infos):
        raise ValueError(f"scan: the step function returned {len(outs)} output"
                         f"{'s' if len(outs) != 1 else ''}, but outputs_info has {len(infos)} "
                         f"entr{'ies' if len(infos) != 1 else 'y'}")
    if not outs:
        raise ValueError("scan: the step function returned no output")
    converted = []
    for k, out in enumerate(outs):
        try:
            converted.append(as_tensor(out))
        except TypeError:
            raise TypeError(f"scan: output {k} of the step function is {out!r}, not an array")
    return converted


def _relaxed_state_types(outs, infos, state_types) -> list:
    relaxed = []
    for k, (out, (kind, init, _), t) in enumerate(zip(outs, infos, state_types)):
        if kind == NIT_SOT:
            relaxed.append(None)
            continue
        if out.dtype != t.dtype or out.ndim != t.ndim:
            raise TypeError(
                f"scan: output {k} of the step function has type {out.type}, but its state "
                f"(outputs_info[{k}], {kind}) has type {t}: the step must return the dtype "
                f"and ndim of the initial value")
        relaxed.append(_join(t, out.type))
    return relaxed


# -- the gradient: a backward Scan ---------------------------------------------------------------
# Reverse-mode gradient of a Scan: a backward Scan over the reversed steps.
#
# The backward loop visits the forward steps last to first. Its sequences are the cotangents
# of the step outputs, the forward sequence slices and the forward state taps (read from the
# forward buffers, so nothing is recomputed across steps). It runs in the other direction than
# the forward loop (layout `backwards`), so its step s reads the sequence rows forward step
# n - 1 - s read, in place, and writes its sequence gradients in the sequences' order; only the
# states, whose entries follow the steps, are read through reversed windows when the forward
# loop itself ran backwards. Its body is the
# vector-Jacobian product of the forward body. A state with taps down to -k carries a window of
# k accumulators (the gradient owed to each of its k most recent entries: PyTensor's mit-mot,
# here as sit-sot carries); each differentiable non-sequence carries its running sum. Sequence
# gradients are the backward loop's nit-sot outputs, added back at their offsets.
def without_unused_outputs(outputs: list, keep=()) -> list:
    """`outputs` computed by graphs whose Scans compute only what they need: each Scan node
    whose outputs are not all read (by the graph or as `outputs`) is restricted to those
    that are (Scan.restrict), once per node, but for the nodes of `keep` (the forward graph,
    which other outputs read as it is). `grad` cleans its pullback with it, so a gradient's
    backward loop carries no dead output."""
    outputs = list(outputs)
    done: set = set(keep)
    while True:
        nodes = toposort(outputs)
        read = set(outputs) | {v for n in nodes for v in n.inputs}
        for node in nodes:
            if not isinstance(node.op, Scan) or node in done:
                continue
            done.add(node)
            restricted = node.op.restrict([k for k, o in enumerate(node.outputs) if o in read])
            if restricted is None:
                continue
            new_op, in_idx, out_idx = restricted
            new = new_op.make_node(*[node.inputs[i] for i in in_idx])
            outputs = graph_replace(outputs, {node.outputs[k]: v
                                              for k, v in zip(out_idx, new.outputs)})
            break
        else:
            return outputs


def _without_unused_inputs(outputs: list) -> list:
    """The outputs of a Scan node (all of them) from a Scan without the inputs they do not
    read."""
    node = outputs[0].owner
    restricted = node.op.restrict(range(len(node.outputs)))
    if restricted is None:
        return outputs
    new_op, in_idx, _ = restricted
    new = new_op(*[node.inputs[i] for i in in_idx])
    return [new] if isinstance(new, Variable) else list(new)


def _is_float(t) -> bool:
    return np.dtype(t.dtype).kind in "fc"


def _steps_cotangent(g, k: int) -> tuple:
    """(the cotangent of a state output's entries from `k` on, True) when `g` is that added
    into zeros (the gradient of `out[k:]`, of those entries' shape as every gradient has its
    variable's: the entries before `k` get none), else (None, False)."""
    inc = g.owner
    if (inc is None or not isinstance(inc.op, IncSubtensor) or inc.op.set_instead_of_inc
            or inc.op.idx_list != (("slice", True, False, False),)
            or not isinstance(inc.inputs[2], Constant) or int(inc.inputs[2].data) != k
            or inc.inputs[1].ndim != g.ndim or inc.inputs[1].dtype != g.dtype):
        return None, False
    base = inc.inputs[0].owner
    if base is None or not (isinstance(base.op, Elemwise)
                            and isinstance(base.op.scalar_op, Second)):
        return None, False
    fill = base.inputs[1]
    while fill.owner is not None and isinstance(fill.owner.op, DimShuffle):
        fill = fill.owner.inputs[0]  # (a 0-d zero broadcast to the rank)
    zero = isinstance(fill, Constant) and not np.any(fill.data)
    return (inc.inputs[1], True) if zero else (None, False)


def _window(x, start: int, n, reverse: bool = False):
    """x[start : start + n], reversed when `reverse` (entry i is x[start + n - 1 - i])."""
    return x[start:start + n][::-1] if reverse else x[start:start + n]


def _is_length_of(n, x) -> bool:
    """Whether the step count `n` is `x.shape[0]` by construction (a sequence's own length)."""
    owner = n.owner
    return owner is not None and isinstance(owner.op, ShapeI) and owner.op.i == 0 \
        and owner.inputs[0] is x


def scan_grad(op, inputs, outputs, output_grads) -> list:
    """Gradients of a Scan node's outer inputs given its outputs' cotangents."""
    lay = op.layout
    n, n_seqs, n_mit, n_states = inputs[0], lay.n_seqs, lay.n_mit_sot, lay.n_states
    seqs = inputs[1:1 + n_seqs]
    inits = inputs[1 + n_seqs:1 + n_seqs + n_states]
    non_seqs = inputs[1 + n_seqs + n_states:]
    lengths = lay.mit_sot_lengths + (1,) * lay.n_sit_sot
    if lay.until:  # the backward loop runs over the steps that ran
        n = shape_i(outputs[0], 0)
        n = sub(n, lengths[0]) if n_states else n
    state_taps = lay.state_taps
    out_types = [o.type for o in outputs]
    grads_out = [g if g.dtype == t.dtype else cast(g, t.dtype)
                 for g, t in zip(output_grads, out_types)]

    f_states = [q for q in range(n_states) if _is_float(op.state_types[q])]
    f_nits = [i for i in range(lay.n_nit_sot) if _is_float(op.inner_output_types[n_states + i])]
    f_seqs = [j for j in range(n_seqs) if _is_float(seqs[j].type)]
    f_non_seqs = [w for w in range(lay.n_non_seqs) if _is_float(non_seqs[w].type)]
    if not (f_seqs or f_non_seqs or f_states) or not (f_states or f_nits):
        return [None] * len(inputs)

    # backward sequences, in the sequences' order (the backward loop runs the other way):
    # step-output cotangents, then the forward body's inputs; a state's entries follow the
    # forward steps, which ran backwards over the sequences when `flip`
    flip = lay.backwards
    # a state's cotangent is mostly the gradient of `out[k:]` (the steps, as vg.scan returns
    # them) added into zeros: read that gradient itself (no zeros of the whole trace)
    tails = {q: _steps_cotangent(grads_out[q], lengths[q]) for q in f_states}
    b_seqs = [(tails[q][0][::-1] if flip else tails[q][0]) if tails[q][1]
              else _window(grads_out[q], lengths[q], n, flip) for q in f_states]
    b_seqs += [grads_out[n_states + i] for i in f_nits]
    b_seqs += [_window(x, o, n) for x, offs in zip(seqs, lay.seq_offsets) for o in offs]
    b_seqs += [_window(outputs[q], lengths[q] + tap, n, flip)
               for q in range(n_states) for tap in state_taps[q]]
    # what each forward step computed (its state and nit-sot outputs): the body's vjp reads
    # them rather than computing them again (tanh' from tanh's output: the forward step's
    # matmuls are not redone); the sequences it does not read go again below
    b_seqs += [_window(outputs[q], lengths[q], n, flip) for q in range(n_states)]
    b_seqs += [outputs[n_states + i] for i in range(lay.n_nit_sot)]
    carries = [zeros_like(inits[q][0] if q < n_mit else inits[q])
               for q in f_states for _ in range(lengths[q])]
    carries += [zeros_like(non_seqs[w]) for w in f_non_seqs]
    n_dx = sum(len(lay.seq_offsets[j]) for j in f_seqs)

    def step(*args):
        it = iter(args)
        g_states = [next(it) for _ in f_states]
        g_nits = [next(it) for _ in f_nits]
        x_vals = [[next(it) for _ in offs] for offs in lay.seq_offsets]
        tap_vals = [[next(it) for _ in taps] for taps in state_taps]
        computed = [next(it) for _ in range(lay.n_outputs)]
        windows = [[next(it) for _ in range(lengths[q])] for q in f_states]
        sums = [next(it) for _ in f_non_seqs]
        ws = [next(it) for _ in non_seqs]
        outs = rebuild_graph(op.fgraph, [v for g in x_vals for v in g]
                             + [v for g in tap_vals for v in g] + ws)
        cotangents: list = [None] * len(outs)
        for g, window, q in zip(g_states, windows, f_states):
            cotangents[q] = g + window[0]
        for g, i in zip(g_nits, f_nits):
            cotangents[n_states + i] = g
        wrt = [v for j in f_seqs for v in x_vals[j]]
        wrt += [v for q in f_states for v in tap_vals[q]] + [ws[w] for w in f_non_seqs]
        grads = vjp(outs, cotangents, wrt)
        grads = [zeros_like(v) if g is None else g for v, g in zip(wrt, grads)]
        dxs, grads = grads[:n_dx], grads[n_dx:]
        new_windows = []
        for window, q in zip(windows, f_states):
            taps = state_taps[q]
            owed = dict(zip(taps, grads[:len(taps)]))
            grads = grads[len(taps):]
            # shift the window by one entry: what was owed to entry t-1-j, plus this step's
            for j in range(lengths[q]):
                parts = [p for p in (window[j + 1] if j + 1 < len(window) else None,
                                     owed.get(-(j + 1))) if p is not None]
                new_windows.append(sum(parts[1:], parts[0]) if parts else zeros_like(window[j]))
        results = [*new_windows, *[s + g for s, g in zip(sums, grads)], *dxs]
        placeholders = set(args)
        stored = {out: value for out, value in zip(outs, computed)
                  if out.owner is not None and out not in placeholders
                  and out.type == value.type}
        return graph_replace(results, stored) if stored else results

    buffers, _ = scan_buffers(step, sequences=b_seqs,
                              outputs_info=[*carries, *[None] * n_dx],
                              non_sequences=list(non_seqs), n_steps=n, backwards=not flip)
    buffers = _without_unused_inputs(buffers)
    finals = [b[-1] for b in buffers[:len(carries)]]
    dxs = buffers[len(carries):]

    result: list = [None] * len(inputs)
    k = 0
    for j in f_seqs:
        if lay.seq_offsets[j] == (0,) and not lay.until and _is_length_of(n, seqs[j]):
            result[1 + j] = dxs[k]  # one row per step, the sequence's every row
            k += 1
            continue
        dx = zeros_like(seqs[j])
        for o in lay.seq_offsets[j]:
            dx = inc_subtensor(dx[o:o + n], dxs[k])
            k += 1
        result[1 + j] = dx
    k = 0
    for q in f_states:
        window, k = finals[k:k + lengths[q]], k + lengths[q]
        g, steps_only = grads_out[q], tails[q][1]
        if q < n_mit:  # entry r of the initial value is owed window[k - 1 - r]
            rows = [window[lengths[q] - 1 - r] if steps_only else
                    g[r] + window[lengths[q] - 1 - r] for r in range(lengths[q])]
            result[1 + n_seqs + q] = stack(rows)
        else:
            result[1 + n_seqs + q] = window[0] if steps_only else g[0] + window[0]
    for w, total in zip(f_non_seqs, finals[k:]):
        result[1 + n_seqs + n_states + w] = total
    return result
