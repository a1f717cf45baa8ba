"""Row groups on the GPU: the steps of a scheduled RowGroup (verglas/schedule/rowgroups.py)
as ONE kernel.

A block takes a row at a time (a block-stride loop over rows, uniform within the block, so
every thread reaches each barrier); its threads stride over the row's columns. Per member, in
order:
- a reduction folds each thread's columns, then the block's partial values meet in a
  shared-memory tree; the row's value is then in every thread's registers;
- an elementwise step over (R, 1) values is computed by every thread in registers;
- an elementwise step over (R, C) writes its stored outputs in one pass over the columns (and
  the reductions riding on it accumulate in that pass); an output the group alone reads
  ("one row" in the Program) is never stored: each pass that reads it recomputes it from its
  own inputs (softmax's exp(x - max) is computed in the sum's pass and again in the
  division's).
Each thread reads back only the columns it wrote, so passes need no barrier between them.
"""

from __future__ import annotations

import numpy as np

from verglas.cuda_backend import templates as T
from verglas.cuda_backend.kernels import _tuple, output_storage
from verglas.graph.basic import Constant
from verglas.graph.types import TensorType
from verglas.ops.elemwise import Elemwise
from verglas.ops.reduce import Max, Min, Sum

__all__ = ["row_group_fusable", "row_group_kernel", "emit_row_group"]

_KIND = {Sum: "sum", Max: "max", Min: "min"}


def row_group_fusable(program, group) -> bool:
    """Whether the group runs as one kernel: no member overwrites (inplace) an (R, C) buffer
    that a recomputed row-local value reads, since recomputing it later would read the new
    values."""
    producers = {b: s for s in group.steps for b in s.outputs}
    recomputed_from: set[int] = set()

    def sources(b):
        step = producers.get(b)
        if step is None or group.local.get(b) != "row":
            return {b}
        return set().union(*(sources(i) for i in step.inputs))

    for b, kind in group.local.items():
        if kind == "row":
            recomputed_from |= sources(b) - {b}
    for step in group.steps:
        for b in step.outputs:
            target = program.buffers[b].takes_over
            if target is not None and program.buffers[target].ndim == group.ndim and \
                    program.buffers[target].var.type.shape[-1] != 1 \
                    and target in recomputed_from:
                return False
        if not isinstance(step.node.op, Elemwise) and step.node.inputs[0].type.shape[-1] == 1:
            return False  # a "reduction" over one column: a copy, not worth a pass
    plan = _Plan(program, group)
    return all(plan.column_source(d) is not None for d in plan.col_dims)


class _Plan:
    """What the kernel reads and writes, in parameter order, and how."""

    def __init__(self, program, group):
        self.program = program
        self.group = group
        self.produced = {b: s for s in group.steps for b in s.outputs}
        self.stored = [b for s in group.steps for b in s.outputs if b not in group.local]
        self.inputs: list[int] = []  # external buffers read (arrays or scalars)
        self.element_bases: set[int] = set()  # arrays the group reads single elements of
        for step in group.steps:
            for i, b in enumerate(step.inputs):
                if step.element_index(i) is not None:
                    self.element_bases.add(b)
                if b not in self.produced and b not in self.inputs:
                    self.inputs.append(b)
        # the column counts of the passes, each a kernel parameter
        self.col_dims: list = []
        for step in group.steps:
            b = step.outputs[0] if isinstance(step.node.op, Elemwise) else step.inputs[0]
            if not self.per_row(b) and self.cols_of(b) not in self.col_dims:
                self.col_dims.append(self.cols_of(b))

    def cols_of(self, b):
        """The column count of (R, C) buffer b: a variable of the Program's shape graph."""
        return self.program.shapes.dims_of(b)[-1]

    def column_source(self, dim):
        """(external input buffer, None) whose axis 1 is `dim`, or (None, static length)."""
        for b in self.inputs:
            var = self.var(b)
            if var.ndim == 2 and self.program.shapes.dims_of(b)[-1] is dim:
                return b, None
        for b in self.produced:
            var = self.var(b)
            if var.ndim == 2 and self.cols_of(b) is dim and var.type.shape[1] is not None:
                return None, var.type.shape[1]
        return None

    def var(self, b):
        """Buffer b's variable as the kernel sees it: (rows..., C) buffers as (rows, C)."""
        var = self.program.buffers[b].var
        return _as_rows(var, self.group.ndim)

    def per_row(self, b) -> bool:
        """A buffer of one value per row ((R, 1) or a reduction's (R,))."""
        var = self.var(b)
        return var.ndim == 1 or (var.ndim == 2 and var.type.shape[1] == 1)


def _one_element(var) -> bool:
    return all(d == 1 for d in var.type.shape)


def _as_rows(var, ndim: int):
    """`var` of a group over (rows..., C) buffers as the 2-d (rows, C) (1-d (rows,) for a
    reduction without keepdims) variable the kernel takes: the host passes reshaped views."""
    if ndim == 2 or var.ndim < ndim - 1 or _one_element(var) and isinstance(var, Constant):
        return var
    lead = var.type.shape[:ndim - 1]
    rows = 1 if all(d == 1 for d in lead) else None
    if None not in lead:
        rows = int(np.prod(lead, dtype=np.int64))
    shape = (rows,) if var.ndim == ndim - 1 else (rows, var.type.shape[-1])
    return TensorType(var.type.dtype, shape).make_variable()


CACHED = 16  # columns per thread the cached kernel holds in registers (cols <= 16 * threads)


def _passes(plan) -> list[tuple]:
    """The group's passes over a row, in order: ("reduce", step), ("map", step, riders) over
    the columns, ("values", step) per row in registers."""
    group = plan.group
    out = []
    for step in group.steps:
        if step.index in group.inlined or step.index in group.riding:
            continue  # computed in another member's pass
        if not isinstance(step.node.op, Elemwise):
            out.append(("reduce", step))
        elif all(plan.per_row(b) for b in step.outputs):
            out.append(("values", step))
        else:
            riders = [s for s in group.steps if group.riding.get(s.index) == step.index]
            if riders or any(b not in group.local for b in step.outputs):
                out.append(("map", step, riders))
    return out


def _column_reads(plan, b) -> set:
    """The (R, C) buffers reading `b` at a column touches: itself, and for a row-local value
    recomputed there, what its producer reads."""
    step = plan.produced.get(b)
    if plan.per_row(b) or plan.var(b).ndim != 2 or b in plan.element_bases or (
            b in plan.inputs and _one_element(plan.var(b))):
        return set()
    if step is None or plan.group.local.get(b) != "row":
        return {b}
    return {b}.union(*(_column_reads(plan, i) for i in step.inputs))


def row_group_kernel(name: str, program, group, threads: int, cached: bool = False):
    """(KernelSpec, parameter buffer ids) of `group`'s kernel: parameters are the stored
    outputs, then the external inputs (arrays; one-element ones as 1-d arrays), then the row
    and column counts. `cached`: a value read in two passes or more (an input, a row-local
    value) is kept in the thread's registers from its first pass on, so the input is read
    once; the kernel then needs every column count <= CACHED * threads."""
    return _RowKernel(name, _Plan(program, group), threads, cached).build()


class _RowKernel:
    """Builds one row-group kernel (see row_group_kernel)."""

    def __init__(self, name, plan, threads: int, cached: bool):
        self.plan, self.group, self.threads = plan, plan.group, threads
        self.kb = T.KernelBuilder(name)
        self.arrays: dict[int, str] = {}
        self.literals: dict[int, str] = {}
        self.regs: dict[int, str] = {}  # per-row values in every thread's registers
        self.shared: dict[str, str] = {}  # accumulator dtype -> shared array
        self.cache: dict[int, str] = {}  # buffer -> its local array of per-thread columns
        self.filled: set[int] = set()  # cached buffers whose first pass has run
        self.passes = _passes(plan)
        if cached:
            seen: dict[int, int] = {}
            for p in self.passes:
                if p[0] == "values":
                    continue
                touched = p[1].inputs[:1] if p[0] == "reduce" else p[1].inputs + p[1].outputs
                reads = set().union(*(_column_reads(plan, b) for b in touched))
                for b in reads:
                    seen[b] = seen.get(b, 0) + 1
            for b, n in seen.items():
                if n > 1:
                    self.cache[b] = f"rc{len(self.cache)}"

    def build(self):
        kb, plan = self.kb, self.plan
        params: list[int] = []
        for b in plan.stored:
            var = plan.var(b)
            self.arrays[b] = kb.param("o", T.Arr(var.type.dtype, var.ndim, "A"))
            params.append(b)
        for b in plan.inputs:
            var = plan.var(b)
            if isinstance(var, Constant) and var.data.size == 1:
                self.literals[b] = T.literal(np.asarray(var.data).reshape(()), var.type.dtype)
                continue
            ndim = 1 if _one_element(var) else var.ndim
            self.arrays[b] = kb.param("a", T.Arr(var.type.dtype, ndim, "A"))
            params.append(b)
        rows = kb.param("rows", T.Scal("int64"))
        self.cols = {d: kb.param("cols", T.Scal("int64")) for d in plan.col_dims}
        kb.line("tid = cuda.threadIdx.x")
        for b, name in self.cache.items():
            held = T.held(plan.var(b).type.dtype)
            kb.line(f"{name} = cuda.local.array({CACHED}, {T.np_dtype(held)})")
        kb.line(f"for row in range(cuda.blockIdx.x, {rows}, cuda.gridDim.x):")
        with kb.indent():
            self.filled.clear()
            for p in self.passes:
                getattr(self, "_" + p[0])(*p[1:])
        return kb.spec(), params

    # -- the passes --------------------------------------------------------------------------
    def _reduce(self, step) -> None:
        state = self._start(step)
        with self._columns(self.plan.cols_of(step.inputs[0])) as memo:
            self._fold(state, self._at(step.inputs[0], memo))
        self._finish(state)

    def _values(self, step) -> None:
        for b, value in zip(step.outputs, self._elemwise(step, {})):
            self._keep_row_value(b, value)

    def _map(self, step, riders) -> None:
        states = [self._start(s) for s in riders]
        with self._columns(self.plan.cols_of(step.outputs[0])) as memo:
            for b, value in zip(step.outputs, self._elemwise(step, memo)):
                memo[b] = value
                if b in self.arrays:
                    self.kb.line(f"{self.arrays[b]}[row, col] = {value}")
                self._remember(b, value)
            for state in states:
                self._fold(state, memo[state[0].inputs[0]])
        for state in states:
            self._finish(state)

    # -- columns -------------------------------------------------------------------------------
    def _columns(self, dim):
        """A loop over this thread's columns; yields the pass's memo (buffer -> expression)."""
        kb, owner = self.kb, self

        class Loop:
            def __enter__(self):
                if owner.cache:
                    kb.line(f"for kk in range({CACHED}):")
                    kb.depth += 1
                    kb.line(f"col = tid + kk * {owner.threads}")
                    kb.line(f"if col < {owner.cols[dim]}:")
                else:
                    kb.line(f"for col in range(tid, {owner.cols[dim]}, {owner.threads}):")
                kb.depth += 1
                self.memo = {}
                return self.memo

            def __exit__(self, *exc):
                kb.depth -= 2 if owner.cache else 1
                owner.filled.update(b for b in self.memo if b in owner.cache)
                return False

        return Loop()

    def _remember(self, b, value: str) -> None:
        if b in self.cache and b not in self.filled:
            self.kb.line(f"{self.cache[b]}[kk] = {value}")

    def _at(self, b, memo: dict) -> str:
        """An expression of buffer b's element at (row, col) inside a column pass."""
        plan, kb = self.plan, self.kb
        if b in self.literals:
            return self.literals[b]
        if b in self.regs:
            return self.regs[b]
        if b in memo:
            return memo[b]
        if b in self.filled:
            memo[b] = f"{self.cache[b]}[kk]"
            return memo[b]
        var = plan.var(b)
        if b in plan.produced and self.group.local.get(b) == "row":
            step = plan.produced[b]
            for out, value in zip(step.outputs, self._elemwise(step, memo)):
                memo[out] = value
                self._remember(out, value)
            return memo[b]
        name, dtype = self.arrays[b], var.type.dtype
        if _one_element(var):
            return T.load(f"{name}[0]", dtype)
        r = "0" if var.type.shape[0] == 1 else "row"
        c = "0" if var.type.shape[1] == 1 else "col"
        memo[b] = kb.fresh("e")
        kb.line(f"{memo[b]} = {T.load(f'{name}[{r}, {c}]', dtype)}")
        self._remember(b, memo[b])
        return memo[b]

    def _elemwise(self, step, memo: dict) -> list[str]:
        args = [self._at(b, memo) if step.element_index(i) is None else
                T.load(f"{self.arrays[b]}[{', '.join(map(str, step.element_index(i)))}]",
                       step.node.inputs[i].type.dtype)
                for i, b in enumerate(step.inputs)]
        node = step.node
        return self.kb.scalar_expr(node.op.scalar_op, args,
                                   [v.type.dtype for v in node.inputs],
                                   [o.type.dtype for o in node.outputs])

    # -- reductions ----------------------------------------------------------------------------
    def _start(self, step) -> tuple:
        op = step.node.op
        red = T.REDUCERS(_KIND[type(op)], step.node.inputs[0].type.dtype,
                         step.node.outputs[0].type.dtype)
        self.kb.uses(red.combine)
        acc = self.kb.fresh("acc")
        self.kb.line(f"{acc} = {red.identity}")
        return step, red, acc

    def _fold(self, state, value: str) -> None:
        _, red, acc = state
        self.kb.line(f"{acc} = {red.combine.format(a=acc, b=red.to_acc.format(x=value))}")

    def _finish(self, state) -> None:
        """The block's partial values meet in a shared-memory tree: the row's value then sits
        in every thread's registers."""
        kb = self.kb
        step, red, acc = state
        sm = self._smem(red.acc)
        kb.line(f"{sm}[tid] = {acc}")
        kb.line("cuda.syncthreads()")
        T.emit_tree(kb, red, sm, "tid", self.threads)
        value = kb.fresh("v")
        kb.line(f"{value} = {red.final.format(a=f'{sm}[0]')}")
        kb.line("cuda.syncthreads()")  # every thread read it before the array is reused
        self._keep_row_value(step.outputs[0], value)

    def _smem(self, dtype: str) -> str:
        if dtype not in self.shared:
            self.shared[dtype] = f"sm{len(self.shared)}"
            self.kb.lines.insert(0, f"    {self.shared[dtype]} = cuda.shared.array("
                                    f"{self.threads}, {T.np_dtype(T.held(dtype))})")
        return self.shared[dtype]

    def _keep_row_value(self, b, value: str) -> None:
        self.regs[b] = value
        if b in self.arrays:
            index = "row, 0" if self.plan.var(b).ndim == 2 else "row"
            if self.plan.program.buffers[b].takes_over is not None:
                # it overwrites what it was computed from: every thread has read that first
                self.kb.line("cuda.syncthreads()")
            self.kb.line("if tid == 0:")
            with self.kb.indent():
                self.kb.line(f"{self.arrays[b]}[{index}] = {value}")


def emit_row_group(gen, group, contexts) -> None:
    """Emit the host lines launching `group`'s kernel (its members' StepContexts in order)."""
    program = gen.program
    ctx0 = contexts[0]
    threads = ctx0.threads
    spec, params = row_group_kernel(f"k{group.first}_rows", program, group, threads)
    kernel = ctx0.kernel(spec)
    cached_spec, _ = row_group_kernel(f"k{group.first}_rows_cached", program, group, threads,
                                      cached=True)
    cached = ctx0.kernel(cached_spec) if cached_spec.source != spec.source else None
    plan = _Plan(program, group)
    where = {}  # external buffer -> (a member's StepContext, its input position)
    for ctx in contexts:
        for i, b in enumerate(ctx.step.inputs):
            where.setdefault(b, (ctx, i))

    def device(b) -> str:
        ctx, i = where[b]
        return ctx.dev(i)

    for ctx in contexts:
        for i, index in ctx.step.element_reads:
            ctx0.line(f"H.check_index({str(ctx.op)!r}, {ctx.dev(i)}.shape, {index!r})")
    r = ctx0.fresh("r")
    nd = group.ndim
    rows = next((b for b in plan.inputs if program.buffers[b].var.ndim == nd
                 and all(x is y for x, y in zip(program.shapes.dims_of(b)[:-1], group.rows))),
                None)
    lead = ([f"{device(rows)}.shape[{k}]" for k in range(nd - 1)] if rows is not None
            else [str(d) for d in group.steps[0].node.outputs[0].type.shape[:-1]])
    ctx0.line(f"{r} = {' * '.join(lead)}")
    cols = {}
    for d in plan.col_dims:
        b, static = plan.column_source(d)
        cols[d] = ctx0.fresh("c")
        ctx0.line(f"{cols[d]} = {device(b)}.shape[-1]" if b is not None
                  else f"{cols[d]} = {static}")
    for step in group.steps:
        op = step.node.op
        if not isinstance(op, Elemwise) and not op.has_identity:
            ctx0.line(f"if {cols[plan.cols_of(step.inputs[0])]} == 0:")  # (no rows: numpy too)
            with ctx0.indent():
                message = f"{op}: zero-size reduction has no identity"
                ctx0.line(f"raise ValueError({message!r})")
    outs = {}
    for ctx in contexts:
        for j, b in enumerate(ctx.step.outputs):
            if b in group.local:
                continue
            var = plan.var(b)
            if var.ndim == 1:
                last = []
            elif var.type.shape[1] == 1:
                last = ["1"]
            else:
                last = [cols[plan.cols_of(b)]]
            name = output_storage(ctx, j, _tuple(lead + last if nd > 2 else [r, *last]))
            # (rows..., C) outputs: allocated N-d, the kernel writes them as (rows, C) views
            outs[b] = name if nd == 2 else f"{name}.reshape({_tuple([r, *last])})"
    args = []
    for b in params:
        var = plan.var(b)
        if b in outs:
            args.append(outs[b])
        elif _one_element(var):
            args.append(f"{device(b)}.reshape(1)")
        elif nd > 2 and program.buffers[b].var.ndim == nd:  # a view, or a copy when strided
            n = r if var.type.shape[0] != 1 else "1"
            args.append(f"{device(b)}.reshape(({n}, {device(b)}.shape[-1]))")
        else:
            args.append(device(b))
    args += [r] + [cols[d] for d in plan.col_dims]
    launch = f"(H.blocks(L, {r}, 1), L.threads, {', '.join(args)})"
    ctx0.line(f"if {r}:")
    with ctx0.indent():
        if cached is None:
            ctx0.line(f"{kernel}{launch}")
        else:  # the input read once while the rows fit in the threads' registers
            fits = " and ".join(f"{cols[d]} <= {CACHED * threads}" for d in plan.col_dims)
            ctx0.line(f"({cached} if {fits} else {kernel}){launch}")
