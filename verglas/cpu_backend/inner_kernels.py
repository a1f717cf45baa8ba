"""CPU kernels of the inner-graph ops: OpFromGraph and Scan call the function generated once
per distinct sub-program (see StepContext.sub_function); a Scan loop runs in compiled code."""

from __future__ import annotations

from verglas.cpu_backend.dtypes import np_dtype
from verglas.cpu_backend.kernels import emit
from verglas.ops.op_from_graph import OpFromGraph
from verglas.ops.scan.op import Scan

__all__ = []


def _contiguous(ctx, i: int) -> str:
    """Input `i` as a C-contiguous array (sub-program functions assume C inputs)."""
    return ctx.inp(i) if ctx.is_contiguous(i) else f"np.ascontiguousarray({ctx.inp(i)})"


@emit.register(OpFromGraph)
def _emit_op_from_graph(op, ctx) -> None:
    fn = ctx.sub_function(ctx.step.sub_program)
    args = [_contiguous(ctx, i) for i in range(len(ctx.node.inputs))]
    res = ctx.fresh("r")
    ctx.line(f"{res} = {fn}({', '.join(args)})")
    for j in range(len(ctx.node.outputs)):
        ctx.line(f"{ctx.out(j)} = {res}[{j}]")


def _row(buf: str, index: str, row_ndim: int) -> str:
    """Entry `index` of `buf` as an array of ndim `row_ndim` (a C view, also when 0-d)."""
    if row_ndim == 0:
        return f"{buf}[{index}:{index} + 1].reshape(())"
    return f"{buf}[{index}]"


@emit.register(Scan)
def _emit_scan(op, ctx) -> None:
    lay = op.layout
    node = ctx.node
    n_seqs, n_states = lay.n_seqs, lay.n_states
    n = ctx.fresh("n")
    ctx.line(f"{n} = np.int64({ctx.inp(0)}.item())")
    ctx.line(f"if {n} < 0:")
    with ctx.indent():
        ctx.raise_("ValueError", f"{op}: n_steps must be >= 0")
    seqs = []
    for j, offs in enumerate(lay.seq_offsets):
        s = ctx.fresh("seq")
        ctx.line(f"{s} = {_contiguous(ctx, 1 + j)}")
        ctx.line(f"if {s}.shape[0] < {n} + {max(offs)}:")
        with ctx.indent():
            ctx.raise_("ValueError", f"{op}: sequence {j} is shorter than the steps need")
        seqs.append(s)
    lengths = lay.mit_sot_lengths + (1,) * lay.n_sit_sot
    bufs = []
    for q, (k, st) in enumerate(zip(lengths, op.state_types)):
        init = ctx.inp(1 + n_seqs + q)
        buf = ctx.fresh("buf")
        if q < lay.n_mit_sot:
            ctx.line(f"if {init}.shape[0] != {k}:")
            with ctx.indent():
                ctx.raise_("ValueError", f"{op}: mit-sot initial value {q} needs a leading "
                                         f"length of {k}")
            ctx.line(f"{buf} = np.empty(({k} + {n},) + {init}.shape[1:], {np_dtype(st.dtype)})")
            ctx.line(f"{buf}[:{k}] = {init}")
        else:
            ctx.line(f"{buf} = np.empty((1 + {n},) + {init}.shape, {np_dtype(st.dtype)})")
            ctx.line(f"{buf}[0] = {init}.item()" if st.ndim == 0 else f"{buf}[0] = {init}")
        bufs.append(buf)
    non_seqs = [_contiguous(ctx, 1 + n_seqs + n_states + i) for i in range(lay.n_non_seqs)]
    nit_types = op.inner_output_types[n_states:]
    traces = []
    for t in nit_types:
        tr = ctx.fresh("tr")
        empty = "".join(f"{0 if s is None else s}, " for s in t.shape)
        ctx.line(f"{tr} = np.empty((0, {empty}), {np_dtype(t.dtype)})")
        traces.append(tr)
    fn = ctx.sub_function(ctx.step.sub_program)
    step = ctx.fresh("t")
    ctx.line(f"for {step} in range({n}):")
    with ctx.indent():
        args = []
        for s, offs, j in zip(seqs, lay.seq_offsets, range(n_seqs)):
            row_ndim = node.inputs[1 + j].ndim - 1
            args += [_row(s, f"{step} + {o}", row_ndim) for o in offs]
        for buf, k, taps, st in zip(bufs, lengths, lay.state_taps, op.state_types):
            args += [_row(buf, f"{k + tap} + {step}", st.ndim) for tap in taps]
        args += non_seqs
        res = ctx.fresh("r")
        ctx.line(f"{res} = {fn}({', '.join(args)})")
        for q, (buf, k, st) in enumerate(zip(bufs, lengths, op.state_types)):
            v = ctx.fresh("v")
            ctx.line(f"{v} = {res}[{q}]")
            ctx.line(f"if {v}.shape != {buf}.shape[1:]:")
            with ctx.indent():
                ctx.raise_("ValueError", f"{op}: a step gave state output {q} a shape other "
                                         f"than its previous value's")
            target = f"{buf}[{k} + {step}]"
            ctx.line(f"{target} = {v}.item()" if st.ndim == 0 else f"{target} = {v}")
        for i, (tr, t) in enumerate(zip(traces, nit_types)):
            v = ctx.fresh("v")
            ctx.line(f"{v} = {res}[{n_states + i}]")
            ctx.line(f"if {step} == 0:")
            with ctx.indent():
                ctx.line(f"{tr} = np.empty(({n},) + {v}.shape, {np_dtype(t.dtype)})")
            ctx.line(f"elif {v}.shape != {tr}.shape[1:]:")
            with ctx.indent():
                ctx.raise_("ValueError", f"{op}: a step gave nit-sot output {i} a shape other "
                                         f"than earlier steps'")
            ctx.line(f"{tr}[{step}] = {v}.item()" if t.ndim == 0 else f"{tr}[{step}] = {v}")
    for j, name in enumerate(bufs + traces):
        ctx.line(f"{ctx.out(j)} = {name}")
