"""The Scan op: a loop whose body is a frozen inner graph, with its tap layout as props.

Outer inputs: `[n_steps, *sequences, *mit_sot_initials, *sit_sot_initials, *non_sequences]`.
Inner inputs: each sequence's slices (one per offset), each mit-sot's taps, each sit-sot's
previous value, then the non-sequences. Inner outputs: the new mit-sot, sit-sot and nit-sot
values, in that order. Outer outputs: the mit-sot and sit-sot buffers (initial values first,
then one entry per step: PyTensor's layout) and the nit-sot traces (one entry per step).

`scan_buffers` (build.py) builds a Scan from a Python step function; the gradient of a Scan
is a backward Scan built the same way (grad.py).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from verglas.graph.basic import Apply, Constant, Variable
from verglas.graph.frozen import FrozenFunctionGraph, freeze
from verglas.graph.op import Op
from verglas.graph.traversal import ancestors
from verglas.graph.types import TensorType
from verglas.ops.basic import as_tensor, constant, shape_i, shape_str
from verglas.ops.indexing import inc_subtensor
from verglas.ops.math import add, cast, minimum, zeros_like
from verglas.ops.op_from_graph import connection_pattern, infer_shapes, rebuild_graph, run_inner
from verglas.ops.scan.row_shapes import evaluate, row_shapes

__all__ = ["Scan", "ScanLayout"]


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
                expect = shape_str((None, *want.shape) if lead else want.shape)
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
        # (grad.py builds the backward Scan through build.py, which imports this module)
        from verglas.ops.scan.grad import scan_grad

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
