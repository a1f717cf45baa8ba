"""CPU kernels of the inner-graph ops. An OpFromGraph calls the function generated once per
distinct sub-program (see StepContext.sub_function). A Scan is one loop in the program's
function with its body inline (StepContext.emit_body), as the step's Loop says
(schedule/loops.py): 0-d states in locals, states computed straight into their rows,
sequences read in place; no call, tuple or allocation per step."""

from __future__ import annotations

import numba

from verglas.cpu_backend.dtypes import cast_expr, np_dtype
from verglas.cpu_backend.intrinsics import c_head, c_row, c_view, own_row
from verglas.cpu_backend.kernels import emit, register_helper
from verglas.cpu_backend.shape_kernels import copy_into
from verglas.ops.op_from_graph import OpFromGraph
from verglas.ops.scan.op import Scan
from verglas.ops.scan.row_shapes import Length, row_shapes
from verglas.scalar_code import substitute

__all__ = []


def _contiguous(ctx, i: int) -> str:
    """Input `i` as a C-contiguous array (sub-program functions assume C inputs)."""
    return ctx.inp(i) if ctx.is_contiguous(i) else ctx.contiguous(ctx.inp(i))


@emit.register(OpFromGraph)
def _emit_op_from_graph(op, ctx) -> None:
    ctx.call_sub_function(ctx.step.sub_program,
                          [_contiguous(ctx, i) for i in range(len(ctx.node.inputs))])


@register_helper
@numba.njit(cache=False, error_model="numpy")
def rows_contiguous(a):
    """Whether every a[i] is C-contiguous (dims of length 1 take any stride)."""
    expected = a.itemsize
    for d in range(a.ndim - 1, 0, -1):
        if a.shape[d] != 1 and a.strides[d] != expected:
            return False
        expected *= a.shape[d]
    return True


def _copy(ctx, dst: str, src: str, ndim: int, contiguous: bool = True) -> None:
    """dst = src, arrays of one shape (checked before) and ndim `ndim` (0: scalars): C ones by
    the one copy helper (numba's array assignment compiles its broadcasting error's
    formatting, ~0.2 s per signature)."""
    if ndim == 0:
        ctx.line(f"{dst} = {src}")
        return
    d = ctx.fresh("cd")
    ctx.line(f"{d} = {dst}")
    if not contiguous:
        ctx.line(f"{d}[...] = {src}")
        return
    s = ctx.fresh("cs")
    ctx.line(f"{s} = {src}")
    view = ctx.helper("view", c_view)
    ctx.line(f"{ctx.helper('copy_into', copy_into)}({view}({s}, {s}.size), {view}({d}, "
             f"{d}.size))")


def _dims(name: str, first: int, ndim: int) -> list[str]:
    return [f"{name}.shape[{d}]" for d in range(first, first + ndim)]


def _sequence(ctx, j: int, n: str) -> tuple[str, bool]:
    """(name of sequence j with C-contiguous rows, whether its rows are read with c_row)."""
    op, x = ctx.op, ctx.inp(1 + j)
    offs = op.layout.seq_offsets[j]
    ctx.fail_if(f"{x}.shape[0] < {n} + {max(offs)}", "ValueError",
                f"{op}: sequence {j} is shorter than the steps need")
    if ctx.node.inputs[1 + j].ndim == 1 or ctx.is_contiguous(1 + j):
        return x, False
    # rows read in place, also from a view stepping backwards along axis 0 (a gradient's
    # reversed sequences), unless they are not contiguous themselves: then one copy first
    seq = ctx.fresh("seq")
    ctx.line(f"{seq} = {x} if {ctx.helper('rows_c', rows_contiguous)}({x}) else "
             f"{ctx.contiguous(x)}")
    return seq, True


class _State:
    """Where one state's entries live while the loop runs: all of them (row = entry), a ring
    of the last `rows` (the layout keeps only its last entries: row = entry % rows, `wr` the
    row the step writes), or only in its registers (a 0-d state of which no more entries are
    kept than its window holds)."""

    def __init__(self, ctx, q: int, n: str):
        op = ctx.op
        lay, n_seqs = op.layout, op.layout.n_seqs
        self.q, self.st = q, op.state_types[q]
        self.k = k = (lay.mit_sot_lengths + (1,) * lay.n_sit_sot)[q]
        self.kept = kept = lay.kept(q)
        init = ctx.inp(1 + n_seqs + q)
        mit = q < lay.n_mit_sot
        if mit:
            ctx.fail_if(f"{init}.shape[0] != {k}", "ValueError",
                        f"{op}: mit-sot initial value {q} needs a leading length of {k}")
        self.dims = _dims(init, 1 if mit else 0, self.st.ndim)
        self.window = None
        if q in ctx.step.loop.registers:  # window[i]: the state's value i + 1 steps back
            self.window = [ctx.fresh("c") for _ in range(k)]
            for i, c in enumerate(self.window):
                value = f"{init}[{k - 1 - i}]" if mit else (ctx.scalar(1 + n_seqs + q)
                                                            or f"{init}[()]")
                ctx.line(f"{c} = {cast_expr(value, self.st.dtype, ctx.src)}")
        self.rows = self.wr = None
        ring = dict(ctx.step.loop.rings).get(q)
        if kept is None:
            self.buf = ctx.alloc(q, _shape([f"{k} + {n}", *self.dims]))
        elif ring is None:  # (a window holding every entry kept)
            self.buf = None
            return
        else:
            self.rows = ctx.fresh("nr")
            ctx.line(f"{self.rows} = min({ring}, {k} + {n})")
            self.buf = ctx.scratch(_shape([self.rows, *self.dims]), self.st.dtype)
            self.wr = ctx.fresh("wr")
            ctx.line(f"{self.wr} = {k} % {self.rows}")
        for e in range(k):  # the initial entries (a ring keeps the last that fit)
            value = (self.window[k - 1 - e] if self.window is not None
                     else f"{init}[{e}]" if mit else init)
            _copy(ctx, self.entry(e), value, 0 if self.window is not None else self.st.ndim,
                  ctx.is_contiguous(1 + n_seqs + q))

    def entry(self, e) -> str:
        """The row holding entry `e` (before the loop)."""
        return f"{self.buf}[{e}]" if self.rows is None else f"{self.buf}[{e} % {self.rows}]"

    def row(self, ctx, tap: int, t: str) -> str:
        """The row step `t` reads at `tap` (tap 0: the one it writes)."""
        if self.rows is None:
            return f"{self.buf}[{self.k + tap} + {t}]"
        if tap == 0:
            return f"{self.buf}[{self.wr}]"
        r = ctx.fresh("rt")
        ctx.line(f"{r} = {self.wr} - {-tap}")
        ctx.line(f"if {r} < 0:")
        with ctx.indent():
            ctx.line(f"{r} += {self.rows}")
        return f"{self.buf}[{r}]"

    def written_row(self, ctx, t: str) -> str:
        """The row step `t` writes, an array the body's loops know no more of (own_row)."""
        return f"{ctx.helper('own_row', own_row)}({self.row(ctx, 0, t)})"

    def advance(self, ctx) -> None:
        """After a step: the ring's next row."""
        if self.wr is not None:
            ctx.line(f"{self.wr} += 1")
            ctx.line(f"if {self.wr} == {self.rows}:")
            with ctx.indent():
                ctx.line(f"{self.wr} = 0")

    def finish(self, ctx, n: str) -> None:
        """The output: the whole buffer (its first k + n rows), or its last `kept` entries in
        order, `n` the steps that ran."""
        if self.kept is None:
            if ctx.op.layout.until:  # (rows for the most steps, fewer may have run)
                head = ctx.fresh("hd")
                ctx.line(f"{head} = {ctx.helper('c_head', c_head)}({self.buf}, {self.k} + {n})")
                ctx.rename_out(self.q, head)
            return
        if self.buf is None:  # the last entries are the window's
            out = ctx.alloc(self.q, f"({self.kept}, )")
            for j in range(self.kept):
                ctx.line(f"{out}[{j}] = {self.window[self.kept - 1 - j]}")
            return
        m = ctx.fresh("nk")
        ctx.line(f"{m} = min({self.kept}, {self.k} + {n})")
        out = ctx.alloc(self.q, _shape([m, *self.dims]))
        _rotate(ctx, out, self.buf, m, f"{self.wr} - {m}", self.rows, self.st.ndim)


def _length(ctx, expr, named=None) -> str:
    """A row length of `row_shapes` as code over the outer inputs' shapes: each term a name
    of its own, assigned once (an impl_expr such as maximum's reads its argument twice: text
    substituted into text doubled at every level, and a slice of a slice's length took
    numba's liveness analysis past 4 GB, fuzzer seed 14293)."""
    if isinstance(expr, int):
        return str(expr)
    if isinstance(expr, Length):
        return f"{ctx.inp(1 + expr.input)}.shape[{expr.axis}]"
    named = {} if named is None else named
    if id(expr) not in named:
        value = substitute(expr.sop.impl_expr, [_length(ctx, a, named) for a in expr.args])
        name = ctx.fresh("ln")
        ctx.line(f"{name} = {value}")
        named[id(expr)] = (name, expr)  # (the term kept alive: its id stays its own)
    return named[id(expr)][0]


def _shape(dims) -> str:
    return "(" + "".join(f"{d}, " for d in dims) + ")"


def _rotate(ctx, out: str, ring: str, count: str, start: str, rows: str, ndim: int) -> None:
    """out[j] = ring[(start + j) mod rows] for j < count (start >= -rows)."""
    j, r = ctx.fresh("j"), ctx.fresh("rt")
    ctx.line(f"for {j} in range({count}):")
    with ctx.indent():
        ctx.line(f"{r} = {start} + {j}")
        ctx.line(f"if {r} < 0:")
        with ctx.indent():
            ctx.line(f"{r} += {rows}")
        ctx.line(f"elif {r} >= {rows}:")
        with ctx.indent():
            ctx.line(f"{r} -= {rows}")
        _copy(ctx, f"{out}[{j}]", f"{ring}[{r}]", ndim)


@emit.register(Scan)
def _emit_scan(op, ctx) -> None:
    lay, node, loop, body = op.layout, ctx.node, ctx.step.loop, ctx.step.sub_program
    n_seqs, n_states = lay.n_seqs, lay.n_states
    n = ctx.fresh("n")
    ctx.line(f"{n} = np.int64({ctx.scalar(0) or ctx.inp(0) + '[()]'})")
    ctx.fail_if(f"{n} < 0", "ValueError", f"{op}: n_steps must be >= 0")
    seqs = [_sequence(ctx, j, n) for j in range(n_seqs)]
    states = [_State(ctx, q, n) for q in range(n_states)]
    non_seqs = []
    for w in range(lay.n_non_seqs):
        i = 1 + n_seqs + n_states + w
        if node.inputs[i].ndim == 0:
            h = ctx.fresh("h")
            ctx.line(f"{h} = {ctx.scalar(i) or ctx.inp(i) + '[()]'}")
            non_seqs.append(("scalar", h))
        else:
            name = _contiguous(ctx, i)
            if name != ctx.inp(i):
                x = ctx.fresh("ns")
                ctx.line(f"{x} = {name}")
                name = x
            non_seqs.append(("array", name, "C", _dims(name, 0, node.inputs[i].ndim)))
    nit_types = op.inner_output_types[n_states:lay.n_outputs]
    traces = []  # (trace, its ring's next row or None)
    up_front = set()  # the traces allocated before the loop (in the memory plan's storage)
    for i, (t, rows) in enumerate(zip(nit_types, row_shapes(op))):
        tr = ctx.fresh("tr")
        known = all(s is not None or e is not None for s, e in zip(t.shape, rows))
        dims = "".join(f"{s if s is not None else 0 if e is None else _length(ctx, e)}, "
                       for s, e in zip(t.shape, rows))
        wi = None
        if lay.kept(n_states + i) is not None:
            wi = ctx.fresh("wi")
            ctx.line(f"{wi} = 0")
        if wi is None and known:  # the rows' shape is the inputs' lengths': one per step
            ctx.line(f"{tr} = {ctx.alloc(n_states + i, f'({n}, {dims})')}")
            up_front.add(i)
        else:  # (what a loop of no step returns; the first step allocates the trace)
            ctx.line(f"{tr} = np.empty((0, {dims}), {np_dtype(t.dtype)})")
        traces.append((tr, wi))
    step = ctx.fresh("t")
    ran = n  # the steps that ran
    if lay.until:
        ran = ctx.fresh("nran")
        ctx.line(f"{ran} = {n}")
    row = step  # the sequence and nit-sot row step `step` works on
    with ctx.loop(step, n):
        if lay.backwards:
            row = ctx.fresh("r")
            ctx.line(f"{row} = {n} - 1 - {step}")
        inputs = []
        for j, ((x, by_row), offs) in enumerate(zip(seqs, lay.seq_offsets)):
            row_ndim = node.inputs[1 + j].ndim - 1
            for o in offs:
                if row_ndim == 0:
                    inputs.append(("scalar", f"{x}[{row} + {o}]"))
                    continue
                r = ctx.fresh("row")
                at = f"{row} + {o}"
                ctx.line(f"{r} = {ctx.helper('c_row', c_row)}({x}, {at})" if by_row
                         else f"{r} = {x}[{at}]")
                inputs.append(("array", r, "C", _dims(x, 1, row_ndim)))
        for state, taps in zip(states, lay.state_taps):
            for tap in taps:
                if state.window is not None:
                    inputs.append(("scalar", state.window[-tap - 1]))
                    continue
                r = ctx.fresh("row")
                ctx.line(f"{r} = {state.row(ctx, tap, step)}")
                inputs.append(("array", r, "C", _dims(state.buf, 1, state.st.ndim)))
        inputs += non_seqs
        targets = dict(loop.into)
        destinations = {}
        for o in loop.direct:
            if o < n_states:
                where = states[o].written_row(ctx, step)
                message = (f"{op}: a step gave state output {o} a shape other than its "
                           f"previous value's")
            else:
                assert o - n_states in up_front  # (the scheduler's _collected_before_the_loop)
                where = f"{traces[o - n_states][0]}[{row}]"
                message = (f"{op}: a step gave nit-sot output {o - n_states} a shape other "
                           f"than its inputs' lengths give")
            destinations[o] = (where, message, targets.get(o))
        results, directed = ctx.emit_body(body, inputs, destinations)
        for state in states:
            kind, value, *is_c = results[state.q]
            if state.window is not None:
                window, new = state.window, ctx.fresh("c")
                ctx.line(f"{new} = " + cast_expr(value if kind == "scalar" else f"{value}[()]",
                                                 state.st.dtype, ctx.src))
                if state.buf is not None:
                    ctx.line(f"{state.row(ctx, 0, step)} = {new}")
                for i in range(len(window) - 1, 0, -1):
                    ctx.line(f"{window[i]} = {window[i - 1]}")
                ctx.line(f"{window[0]} = {new}")
            elif state.q not in directed and state.q not in loop.in_place:
                ctx.fail_if(f"{value}.shape != {state.buf}.shape[1:]", "ValueError",
                            f"{op}: a step gave state output {state.q} a shape other than its "
                            f"previous value's")
                _copy(ctx, state.written_row(ctx, step), value, state.st.ndim, is_c[0])
            state.advance(ctx)
        for i, ((tr, wi), t) in enumerate(zip(traces, nit_types)):
            kind, value, *is_c = results[n_states + i]
            if n_states + i in directed:  # (computed in its row)
                continue
            kept = lay.kept(n_states + i)
            length = n if kept is None else f"min({kept}, {n})"
            at = row if wi is None else wi
            shape = f"({length},)" + ("" if kind == "scalar" else f" + {value}.shape")
            if i not in up_front:
                ctx.line(f"if {step} == 0:")
                with ctx.indent():  # (the memory plan's storage where it is at hand)
                    planned = ctx.alloc_in_branch(n_states + i, shape) if wi is None else None
                    ctx.line(f"{tr} = " + (planned or f"np.empty({shape}, "
                                                      f"{np_dtype(t.dtype)})"))
            if kind == "scalar":
                ctx.line(f"{tr}[{at}] = {value}")
            else:
                # (true at the first step too, whose row shape made the trace)
                ctx.fail_if(f"{value}.shape != {tr}.shape[1:]", "ValueError",
                            f"{op}: a step gave nit-sot output {i} a shape other than earlier "
                            f"steps'")
                _copy(ctx, f"{tr}[{at}]", value if t.ndim else f"{value}[()]", t.ndim,
                      is_c[0])
            if wi is not None:
                ctx.line(f"{wi} += 1")
                ctx.line(f"if {wi} == {tr}.shape[0]:")
                with ctx.indent():
                    ctx.line(f"{wi} = 0")
        if lay.until:  # stop after the first step whose condition holds
            kind, value, *_ = results[-1]
            ctx.line(f"if {value if kind == 'scalar' else value + '[()]'}:")
            with ctx.indent():
                ctx.line(f"{ran} = {step} + 1")
                ctx.line("break")
    for state in states:
        state.finish(ctx, ran)
    t_ndim = [t.ndim for t in nit_types]
    for j, (tr, wi) in enumerate(traces):
        if wi is None:
            if lay.until:
                tr = f"{ctx.helper('c_head', c_head)}({tr}, {ran})"
            ctx.line(f"{ctx.out(n_states + j)} = {tr}")
            continue
        # the last min(kept, ran) entries, oldest first: the ring's rows from `wi` back
        out, count = ctx.fresh("tk"), ctx.fresh("nk")
        ctx.line(f"{count} = min({lay.kept(n_states + j)}, {ran})")
        ctx.line(f"{out} = np.empty(({count},) + {tr}.shape[1:], {tr}.dtype)")
        _rotate(ctx, out, tr, count, f"{wi} - {count}", f"{tr}.shape[0]", t_ndim[j])
        ctx.line(f"{ctx.out(n_states + j)} = {out}")
