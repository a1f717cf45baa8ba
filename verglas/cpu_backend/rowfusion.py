"""Row groups on the CPU: the steps of a scheduled RowGroup (verglas/schedule/rowgroups.py)
emitted as ONE loop over rows, each step doing its row while the row is in cache; the loop
runs on numba's thread pool when a threading layer safe under concurrent calls loads.

Whole rows go through 1-d row views, float32 row sums accumulate in float32 SIMD lanes, and a
float max/min reduces integer order keys (reduce_kernels.start_order_reduction), which LLVM
vectorizes.
"""

from __future__ import annotations

from verglas.cpu_backend.dtypes import cast_expr
from verglas.cpu_backend.intrinsics import empty_expr, reshaped
from verglas.cpu_backend.kernels import HELPER_REFS, _elemwise_body, literal
from verglas.cpu_backend.parallel_for import call_on_pool, parallel_range
from verglas.cpu_backend.reduce_kernels import (_combine, _identity, order_result, order_update,
                                                start_order_reduction)
from verglas.cpu_backend.threads import parallel_rows
from verglas.graph.basic import Constant
from verglas.ops.reduce import Max, Min
from verglas.schedule.rowgroups import assumed_inputs, is_row_reduce

__all__ = ["emit_row_group"]


HELPER_REFS["parallel_range"] = parallel_range  # generated code calls it by that name


def emit_row_group(group, contexts) -> None:
    """Emit the steps of row `group` (their StepContexts, in order) as one loop over rows, as
    the scheduler planned it (verglas/schedule/rowgroups.py)."""
    ctx0 = contexts[0]
    em = ctx0.em
    program = ctx0.program
    members = [c.step for c in contexts]
    local, inlined, riding = group.local, group.inlined, group.riding
    nd = group.ndim
    lead = _leading_lengths(contexts, group)
    rows = lead[0]
    if nd > 2:  # (rows..., C) buffers are looked at as (rows, C): views made here
        rows = ctx0.fresh("nr")
        ctx0.line(f"{rows} = {' * '.join(lead)}")
    renamed = _as_rows(contexts, group, rows) if nd > 2 else {}
    r = ctx0.fresh("r")

    row_views: dict[int, str] = {}  # buffer -> its row r as a 1-d view, made per row

    def at(ctx, bid, row, col):
        """The element (row, col) of buffer `bid` as the loop body reads or writes it.

        Whole rows go through 1-d row views: indexing the 2-d array inside the column loop
        keeps LLVM from vectorizing it (logsumexp 3.1 -> 0.67 ms measured)."""
        name = ctx._names[bid]
        kind = local.get(bid)
        if kind == "value":
            return name
        if kind == "row":
            return f"{name}[{col}]"
        if row == r and col != "0":
            if bid not in row_views:
                row_views[bid] = ctx.fresh("rv")
            return f"{row_views[bid]}[{col}]"
        return f"{name}[{row}, {col}]"

    work = program.pool_work(group.first) if parallel_rows() else None  # (pools.py)
    parallel = work is not None
    scratch_lines: list[str] = []  # allocations of the scratch rows, before the loop
    row_aliases: dict[int, int] = {}  # row-local buffer -> the one whose storage it takes over
    scratch: list[int] = []  # row-local buffers with a scratch row of their own
    plans = {}  # step index -> what the loop body emits for it
    cols_of = {}  # buffer the group writes -> its column count
    made_here = {b for s in members for b in s.outputs}  # buffers the group computes
    checked = set(program.broadcast_checks)  # (members only in the specialized variant)
    for ctx in contexts:  # allocations and one-element inputs, before the loop
        node, step = ctx.node, ctx.step
        if is_row_reduce(node):
            x = ctx.inp(0)
            cols = f"{x}.shape[1]" if step.inputs[0] not in local else None
            if not node.op.has_identity:
                ctx.fail_if(f"{cols or cols_of[step.inputs[0]]} == 0", "ValueError",
                            f"{node.op}: zero-size array to a reduction that has no identity")
            if step.outputs[0] not in local:
                shape = f"({rows}, 1, )" if node.op.keepdims else f"({rows}, )"
                if nd > 2:
                    dims = [*lead, "1"] if node.op.keepdims else lead
                    _alloc_rows(ctx, 0, dims, shape, renamed)
                else:
                    ctx.alloc(0, shape)
            plans[step.index] = ("reduce", ctx)
            continue
        modes = group.modes[step.index]
        scalars, arrays = {}, {}
        for i, (var, mode) in enumerate(zip(node.inputs, modes)):
            if mode == "scalar" and step.inputs[i] in made_here:
                # one element computed by this group's loop: read where it is, once computed
                arrays[i] = ("bcast", "bcast")
            elif mode == "scalar":
                if isinstance(var, Constant):
                    scalars[i] = literal(var.data.reshape(()), var.type.dtype, ctx)
                else:
                    h = ctx.fresh("h")
                    first = f"[{', '.join(['0'] * var.ndim)}]"
                    ctx.line(f"{h} = {ctx.scalar(i) or ctx.inp(i) + first}")
                    scalars[i] = h
            else:
                arrays[i] = mode
        out_static = node.outputs[0].type.shape
        if out_static[-1] == 1:
            cols = "1"
        elif out_static[-1] is not None:
            cols = str(out_static[-1])
        else:
            cols = next(f"{ctx.inp(i)}.shape[1]" if step.inputs[i] not in local
                        else cols_of[step.inputs[i]]
                        for i, mode in arrays.items() if mode[1] == "full")
        if step.index in checked:
            _check_assumed(ctx, arrays, cols, cols_of, lead, renamed)
        for j, b in enumerate(step.outputs):
            cols_of[b] = cols
            taken = program.buffers[b].takes_over
            if step.index in inlined or local.get(b) == "value":
                continue
            if local.get(b) == "row":
                if taken is not None:
                    row_aliases[b] = taken
                else:
                    scratch.append(b)
                    shape = f"({cols},)"
                    scratch_lines.append(f"{ctx.out(j)} = "
                                         f"{empty_expr(ctx.src, shape, node.outputs[j].dtype)}")
            elif nd > 2:
                _alloc_rows(ctx, j, [*lead, cols], f"({rows}, {cols})", renamed)
            else:
                ctx.alloc(j, f"({rows}, {cols}, )")
        plans[step.index] = ("elemwise", ctx, scalars, arrays, cols)
    def elemwise_body(plan, col, targets):
        _, ctx, scalars, arrays, _ = plan

        def index_of(i):
            mode = arrays[i]
            return at(ctx, ctx.step.inputs[i], r if mode[0] == "full" else 0,
                      col if mode[1] == "full" else 0)

        _elemwise_body(ctx, ctx.op, scalars, index_of, targets)

    def reduce_start(ctx):
        """Emit a row reduction's accumulators; the state reduce_update/finish use."""
        op = ctx.node.op
        out_dtype = ctx.node.outputs[0].dtype
        # a row's float32 sum accumulates in float32 SIMD lanes (reassociated, so each lane
        # adds cols/32 values): a float64 accumulator halves the lanes and, fed by an inlined
        # exp, kept the loop scalar (logsumexp 3.1 -> 1.6 ms measured)
        acc = ctx.fresh("acc")
        if isinstance(op, (Max, Min)) and out_dtype in ("float32", "float64"):
            return ctx, acc, start_order_reduction(ctx, op, out_dtype, acc)
        ctx.line(f"{acc} = {_identity(op, out_dtype)}")
        return ctx, acc, None

    def reduce_update(state, t):
        ctx, acc, order = state
        if order is None:
            ctx.line(f"{acc} = {_combine(ctx.node.op, acc, t, ctx.node.outputs[0].dtype, ctx)}")
            return
        order_update(ctx, order, acc, t)

    def reduce_finish(state):
        ctx, acc, order = state
        if order is not None:
            ctx.line(f"{acc} = {order_result(order, acc)}")
        out_dtype = ctx.node.outputs[0].dtype
        if ctx.step.outputs[0] in local:
            ctx.line(f"{ctx.out(0)} = {cast_expr(acc, out_dtype, ctx.src)}")
        else:
            index = f"[{r}, 0]" if ctx.node.op.keepdims else f"[{r}]"
            value = cast_expr(acc, out_dtype, ctx.src) if out_dtype == "float16" else acc
            ctx.line(f"{ctx.out(0)}{index} = {value}")

    if not parallel:
        for line in scratch_lines:
            em.line(line)
    loop_start = len(em.lines)
    em.line(f"for {r} in range({'lo, hi' if parallel else rows}):")
    em.depth += 1
    body_start = len(em.lines)
    for ctx in contexts:
        step = ctx.step
        if step.index in inlined:
            continue
        plan = plans[step.index]
        if plan[0] == "reduce":
            if step.index in riding:
                continue  # computed in its producer's loop
            x = step.inputs[0]
            producer = next((s for s in members if s.index in inlined and s.outputs[0] == x),
                            None)
            cols = cols_of[x] if x in local else f"{ctx.inp(0)}.shape[1]"
            state = reduce_start(ctx)
            j, t = ctx.fresh("j"), ctx.fresh("t")
            ctx.line(f"for {j} in range({cols}):")
            with ctx.indent():
                if producer is not None:
                    elemwise_body(plans[producer.index], j, [t])
                else:
                    ctx.line(f"{t} = {at(ctx, x, r, j)}")
                reduce_update(state, t)
            reduce_finish(state)
            continue
        cols = plan[4]
        riders = [plans[k][1] for k, e in riding.items() if e == step.index]
        states = [reduce_start(c) for c in riders]
        j = ctx.fresh("j")
        inner = cols != "1"
        if inner:
            ctx.line(f"for {j} in range({cols}):")
            em.depth += 1
        col = j if inner else "0"
        targets = [at(ctx, b, r, col) for b in step.outputs]
        elemwise_body(plan, col, targets)
        for state in states:  # the value just stored: LLVM forwards it, no load
            reduce_update(state, targets[0])
        if inner:
            em.depth -= 1
        for state in states:
            reduce_finish(state)
    top = [f"{ctx0._names[b]} = {ctx0._names[t]}" for b, t in row_aliases.items()]
    top += [f"{view} = {ctx0._names[bid]}[{r}]" for bid, view in row_views.items()]
    em.lines[body_start:body_start] = ["    " * em.depth + line for line in top]
    em.depth -= 1
    if parallel:
        loop = em.lines[loop_start:]
        del em.lines[loop_start:]
        cols = next((c for c in cols_of.values() if c != "1"), "1")
        call_on_pool(ctx0.src, em, scratch_lines, loop, rows, _work(rows, cols, work))
    ctx0._names.update(renamed)  # later steps see the (rows..., C) arrays again


def _work(rows: str, cols: str, eighths: int) -> str:
    """The expression of the group's work units (`eighths` of one per element)."""
    return f"{rows} * {cols}" + ("" if eighths == 8 else f" * {eighths} // 8")


def _check_assumed(ctx, arrays, cols, cols_of, lead, renamed) -> None:
    """A checked step in a group (the specialized variant took its run-time broadcasting to
    be absent): every array it reads over columns has the step's column count, and every
    one over rows the group's leading lengths; RuntimeBroadcast (the general variant runs)
    otherwise. Checked before the loop: a shorter array would be read past its end."""
    step = ctx.step
    unknown = set(assumed_inputs(ctx.program.shapes, step))
    pairs = []
    for i, mode in arrays.items():
        b = step.inputs[i]
        if mode[1] == "full":
            pairs.append((cols_of[b] if b in cols_of else f"{ctx.inp(i)}.shape[1]", cols))
        if i in unknown and mode[0] == "full" and b not in cols_of:
            name = renamed.get(b, ctx.inp(i))
            pairs += [(f"{name}.shape[{a}]", length) for a, length in enumerate(lead)]
    ctx.check_equal([(a, b) for a, b in pairs if a != b], "RuntimeBroadcast", str(step.node.op))


def _leading_lengths(contexts, group) -> list[str]:
    """Expressions of the leading lengths (the rows' dims) of the group: from an array some
    member reads (and the group did not compute) that has them, else static, else from an
    array the first member reads over rows whose lengths the specialized variant checks
    (_check_assumed compares the others with it)."""
    first = contexts[0]
    program = first.program
    made = {b for c in contexts for b in c.step.outputs}
    for ctx in contexts:
        for i, var in enumerate(ctx.node.inputs):
            b = ctx.step.inputs[i]
            dims = program.shapes.dims_of(b)
            if b not in made and var.ndim == group.ndim \
                    and all(a is d for a, d in zip(dims[:-1], group.rows)):
                return [f"{ctx.inp(i)}.shape[{a}]" for a in range(group.ndim - 1)]
    static = first.node.outputs[0].type.shape[:-1]
    if all(d is not None for d in static):
        return [str(d) for d in static]
    modes = group.modes.get(first.step.index) or ()
    i = next(i for i, mode in enumerate(modes) if mode != "scalar" and mode[0] == "full")
    return [f"{first.inp(i)}.shape[{a}]" for a in range(group.ndim - 1)]


def _as_rows(contexts, group, rows: str) -> dict:
    """Rename the N-d arrays the group reads (and did not compute) to (rows, C) or (1, C)
    views; a non-contiguous input is copied once. Returns {buffer: its own name}."""
    made = {b for c in contexts for b in c.step.outputs}
    renamed: dict = {}
    names = contexts[0]._names
    for ctx in contexts:
        modes = group.modes.get(ctx.step.index)
        for i, (b, var) in enumerate(zip(ctx.step.inputs, ctx.node.inputs)):
            if b in made or b in renamed or var.ndim != group.ndim or b not in names:
                continue
            mode = "full" if modes is None else modes[i]
            if mode == "scalar":
                continue
            lead = rows if mode == "full" or mode[0] == "full" else "1"
            name = names[b]
            view = ctx.fresh("rw")
            # (a C-contiguous array: a c_view, a few IR statements; numba's reshape costs
            # hundreds, and compile time follows them)
            src = name if ctx.layout(i) == "C" else ctx.contiguous(name)
            ctx.line(f"{view} = {reshaped(ctx, src, f'({lead}, {name}.shape[{var.ndim - 1}])')}")
            renamed[b] = name
            names[b] = view
    return renamed


def _alloc_rows(ctx, j: int, dims: list[str], rows_shape: str, renamed: dict) -> None:
    """Allocate output `j` with its N-d shape `dims` and look at it as `rows_shape`."""
    names = ctx._names
    taken = ctx.program.buffers[ctx.step.outputs[j]].takes_over
    if taken is not None and taken in renamed:  # inplace: the destroyed input's N-d array
        view, names[taken] = names[taken], renamed[taken]
        name = ctx.alloc(j, f"({', '.join(dims)}, )")
        names[taken] = view
    else:
        name = ctx.alloc(j, f"({', '.join(dims)}, )")
    view = ctx.fresh("rw")
    ctx.line(f"{view} = {reshaped(ctx, name, rows_shape)}")  # (allocated C-contiguous)
    renamed[ctx.step.outputs[j]] = name
    ctx.rename_out(j, view)
