"""CPU kernels of the reductions: Sum, Prod, Max, Min, Any, All, Argmax, Argmin, CumSum.

Each is emitted inline as loops over the input in C order (its own layout for contiguous
inputs): the trailing reduced axes accumulate in a local variable (a loop LLVM vectorizes),
other reduced axes accumulate into the output.
"""

from __future__ import annotations

import copy

import numba
import numpy as np

from verglas.cpu_backend.dtypes import cast_expr, np_dtype
from verglas.cpu_backend.intrinsics import empty_expr, reshaped
from verglas.cpu_backend.parallel_for import pool_lines_since
from verglas.cpu_backend.threads import parallel_rows
from verglas.cpu_backend.kernels import (HELPER_REFS, KernelContext, arith, broadcast_dim,
                                         emit, literal, register_helper, scalar_expr)
from verglas.cpu_backend.vmath import _as_float, _as_int
from verglas.ops.reduce import All, Any, Argmax, Argmin, CumSum, Max, Min, Prod, Reduce, Sum
from verglas.schedule.pools import reduction_parts
from verglas.schedule.variants import broadcast_modes
from verglas.source import any_of, tuple_expr

__all__ = ["start_order_reduction", "order_update", "order_result"]

_jit_inline = numba.njit(inline="always", error_model="numpy")


# LLVM vectorizes an integer max/min reduction but not a float one (without the 'nnan' flag,
# which NaN semantics forbid): IEEE floats without NaN order like their bits read as
# sign-magnitude integers, so the max of the keys is the key of the max (NaN tracked apart).
# Module-level and registered at import, so a cached program finds them by name.
@register_helper
@_jit_inline
def order_key32(x):
    b = _as_int(x)  # int32 keys: twice the SIMD lanes of int64 ones
    return b if b >= 0 else np.int32(b ^ np.int32(0x7FFFFFFF))


@register_helper
@_jit_inline
def order_value32(k):
    return _as_float(np.int32(k if k >= 0 else k ^ np.int32(0x7FFFFFFF)))


@register_helper
@_jit_inline
def order_key64(x):
    b = _as_int(x)
    return b if b >= 0 else b ^ 0x7FFFFFFFFFFFFFFF


@register_helper
@_jit_inline
def order_value64(k):
    return _as_float(k if k >= 0 else k ^ 0x7FFFFFFFFFFFFFFF)


_ORDER = {"float32": (order_key32, order_value32), "float64": (order_key64, order_value64)}


def start_order_reduction(ctx, op, dtype: str, acc: str) -> tuple:
    """Emit the accumulator `acc` of a float Max/Min over order keys (an integer reduction
    LLVM vectorizes) and its NaN flag (tracked apart so the max itself stays a SIMD select);
    returns the state order_update / order_result take."""
    key, value = (ctx.helper(f"{f.py_func.__name__}_", f) for f in _ORDER[dtype])
    nan = ctx.fresh("nan")
    ctx.line(f"{nan} = False")
    # start from the key of -inf (max) or +inf (min): an empty row gives the identity
    start = np.asarray(-np.inf if isinstance(op, Max) else np.inf, dtype)
    bits = start.view("int32" if dtype == "float32" else "int64")
    k = int(bits) if bits >= 0 else int(bits ^ np.iinfo(bits.dtype).max)
    ctx.line(f"{acc} = np.{bits.dtype}({k})")
    return nan, key, value, "max" if isinstance(op, Max) else "min"


def order_update(ctx, order, acc: str, t: str) -> None:
    """Emit the step of an order-key reduction over the value named `t`."""
    nan, key, _, pick = order
    q = ctx.fresh("q")  # a select, not the builtin max/min (an overload numba compiles)
    ctx.line(f"{q} = {key}({t})")
    ctx.line(f"{acc} = {q} if {q} {'>' if pick == 'max' else '<'} {acc} else {acc}")
    ctx.line(f"{nan} = {nan} | ({t} != {t})")


def order_result(order, acc: str) -> str:
    """The reduced float of an order-key reduction (NaN when any value was NaN)."""
    nan, _, value, _ = order
    return f"np.nan if {nan} else {value}({acc})"


def _identity(op, dtype: str) -> str:
    """The starting value of reduction `op` accumulating in `dtype`, as a literal."""
    kind = np.dtype(dtype).kind
    if isinstance(op, Sum):
        return literal(0, dtype)
    if isinstance(op, Prod):
        return literal(1, dtype)
    if isinstance(op, Any):
        return "False"
    if isinstance(op, All):
        return "True"
    lowest = isinstance(op, Max)
    if kind == "c":  # the lexicographic extremes
        inf = "-math.inf" if lowest else "math.inf"
        return f"{np_dtype(dtype)}(complex({inf}, {inf}))"
    if kind == "b":
        return "False" if lowest else "True"
    if kind == "f":
        return literal(-np.inf if lowest else np.inf, dtype)
    info = np.iinfo(dtype)
    return literal(info.min if lowest else info.max, dtype)


def _combine(op, acc: str, v: str, dtype: str, ctx=None) -> str:
    """The expression of `acc` combined with the value named `v` (accumulating in `dtype`;
    complex extremes need `ctx`, to call their helper)."""
    if isinstance(op, (Sum, Prod)):
        value = f"{np_dtype(dtype)}({v})"
        if ctx is None:
            return f"{acc} {'+' if isinstance(op, Sum) else '*'} {value}"
        return arith(ctx, "+" if isinstance(op, Sum) else "*", acc, value, dtype)
    if isinstance(op, Any):
        return f"{acc} or {v} != 0"
    if isinstance(op, All):
        return f"{acc} and {v} != 0"
    if dtype == "bool":
        return f"{acc} or {v}" if isinstance(op, Max) else f"{acc} and {v}"
    if np.dtype(dtype).kind == "c":  # numpy's maximum(acc, v): lexicographic, NaN propagates
        name = "complex_maximum" if isinstance(op, Max) else "complex_minimum"
        return f"{ctx.helper(name, HELPER_REFS[name])}({acc}, {v})"
    cmp = ">" if isinstance(op, Max) else "<"
    # NaN propagates: a NaN value wins, and once the accumulator is NaN no comparison is true
    if np.dtype(dtype).kind == "f":
        return f"{v} if ({v} {cmp} {acc} or {v} != {v}) else {acc}"
    return f"{v} if {v} {cmp} {acc} else {acc}"


def _stored(ctx, value: str, dtype: str) -> str:
    """`value` as stored into a buffer of `dtype` (a float16 result is rounded; the others
    are what numba's store converts)."""
    return cast_expr(value, dtype, ctx.src) if dtype == "float16" else value


def _index(names) -> str:
    return "[" + ", ".join(names) + "]" if names else "[()]"


def _reduced_shape(op, dims: list[str]) -> str:
    axes = set(op.axis)
    if op.keepdims:
        return tuple_expr("1" if a in axes else d for a, d in enumerate(dims))
    return tuple_expr(d for a, d in enumerate(dims) if a not in axes)


class _Elements:
    """How a reduction reads the elements of its input: from the array, or, where the
    scheduler fused the elementwise step producing it (Program.reduce_maps), computed from
    that step's inputs as the loop goes (its one-element inputs read once, before).

    A producer's input whose broadcasting the shapes do not prove is checked to have the
    loop's length (the specialized variant: RuntimeBroadcast), or read with a stride of 0
    along its axes of length 1 (the general variant)."""

    def __init__(self, ctx, ndim: int):
        self.ctx, self.producer = ctx, getattr(ctx, "producer", None)
        self.first_axis: dict[int, str] = {}  # input -> how it reads axis 0 (a producer's)
        if self.producer is None:
            self.x = ctx.inp(0)
            self.dims = [f"{self.x}.shape[{a}]" for a in range(ndim)]
            return
        prod = self.producer
        self.args: list = []  # per input: a scalar's name, or (array name, per-axis index)
        arrays = []
        for i, mode in enumerate(broadcast_modes(ctx.program.shapes, prod.step)):
            var = prod.node.inputs[i]
            if mode != "scalar":
                arrays.append((len(self.args), prod.inp(i), mode))
                self.args.append(None)
                continue
            data = prod.constant_value(i)
            if data is not None:
                value = literal(np.asarray(data).reshape(-1)[0], var.dtype, ctx)
            elif prod.scalar(i) is not None:
                value = prod.scalar(i)
            else:
                value = f"{prod.inp(i)}[{', '.join('0' * var.ndim) or '()'}]"
            h = ctx.fresh("h")
            ctx.line(f"{h} = {value}")
            self.args.append(h)
        message = f"{prod.op}: shapes cannot broadcast"
        self.dims = []
        for a in range(ndim):
            full = [f"{name}.shape[{a}]" for _, name, mode in arrays if mode[a] == "full"]
            unknown = [f"{name}.shape[{a}]" for _, name, mode in arrays if mode[a] == "unknown"]
            if unknown and not ctx.src.specialized:
                self.dims.append(broadcast_dim(ctx, full + unknown, message))
            else:
                self.dims.append((full + unknown + ["1"])[0])
        for k, name, mode in arrays:
            index = []
            for a, m in enumerate(mode):
                if m == "unknown" and ctx.src.specialized:
                    ctx.check_equal([(f"{name}.shape[{a}]", self.dims[a])], "RuntimeBroadcast",
                                    str(prod.op))
                    m = "full"
                if m == "unknown":
                    step = ctx.fresh("u")  # 0 along a broadcast axis
                    ctx.line(f"{step} = 0 if {name}.shape[{a}] == 1 else 1")
                    index.append(lambda i, step=step: f"{i} * {step}")
                else:
                    index.append((lambda i: i) if m == "full" else (lambda i: "0"))
                if a == 0:
                    self.first_axis[k] = m
            self.args[k] = (name, index)

    def splits_rows(self) -> bool:
        """Whether `rows` can split these elements: no input strides axis 0 by a run-time
        step (the general variant's broadcasting)."""
        return not any(m == "unknown" for m in self.first_axis.values())

    def rows(self, start: str, stop: str) -> _Elements:
        """These elements over the rows start:stop of the first axis, read through views from
        their row 0 (emitted here; a loop from 0 over a view vectorizes, one from `start`
        kept numba's wraparound check)."""
        part = copy.copy(self)
        part.dims = [f"{stop} - {start}", *self.dims[1:]]
        if self.producer is None:
            part.x = self.ctx.fresh("pv")
            self.ctx.line(f"{part.x} = {self.x}[{start}:{stop}]")
            return part
        part.args = list(self.args)
        for k, mode in self.first_axis.items():
            if mode == "full":
                name, index = self.args[k]
                view = self.ctx.fresh("pv")
                self.ctx.line(f"{view} = {name}[{start}:{stop}]")
                part.args[k] = (view, index)
        return part

    def read(self, iv: list[str]) -> str:
        """The element at loop indices `iv` (an expression)."""
        if self.producer is None:
            return f"{self.x}{_index(iv)}"
        args = [a if isinstance(a, str) else
                f"{a[0]}[{', '.join(at(i) for at, i in zip(a[1], iv))}]" for a in self.args]
        node = self.producer.node
        (value,) = scalar_expr(self.ctx, node.op.scalar_op, args,
                               [v.dtype for v in node.inputs], [node.outputs[0].dtype])
        return value


@emit.register(Reduce)
def _emit_reduce(op, ctx) -> None:
    # (the scheduler's decisions: Program.shared_kernels, Program.reduce_maps)
    if op in ctx.src.shared_ops and getattr(ctx, "producer", None) is None:
        _emit_reduce_shared(op, ctx)
    else:
        _emit_reduce_inline(op, ctx)


def _emit_reduce_shared(op, ctx) -> None:
    """A call of one kernel function per (op, input type): each inline reduction costs numba
    ~0.1 s of compile, a call a few ms (mlp_grad's gradient has three column sums)."""
    x = ctx.inp(0)
    var = ctx.input_var(0)
    key = ("reduce", op, var.dtype, var.ndim, ctx.layout(0),
           ctx.program.pool_work(ctx.step.index))
    name = ctx.src.shared_kernels.get(key)
    if name is None:
        name = ctx.src.shared_kernels[key] = ctx.src.emitter.fresh("kred")
        kern = ctx.src.child(name)
        kern.emitter.reserve(["p0", "o0"])
        _emit_reduce_inline(op, KernelContext(kern, ctx, {0: ctx.is_contiguous(0)}))
        kern.emitter.line("return")
        ctx.src.functions.append("\n".join([f"def {name}(p0, o0):"] + kern.emitter.lines))
        ctx.src.jit_names.append(name)
    out = ctx.alloc(0, _reduced_shape(op, [f"{x}.shape[{a}]" for a in range(var.ndim)]))
    ctx.line(ctx.src.callee_call(name, [x, out]))


def _emit_reduce_inline(op, ctx) -> None:
    ndim = ctx.input_var(0).ndim
    out_dtype = ctx.node.outputs[0].dtype
    axes = set(op.axis)
    kept = [a for a in range(ndim) if a not in axes]
    elements = _Elements(ctx, ndim)
    dims = elements.dims
    out = ctx.alloc(0, _reduced_shape(op, dims))
    if not op.has_identity and op.axis:
        ctx.fail_if(any_of(f"{dims[a]} == 0" for a in op.axis), "ValueError",
                    f"{op}: zero-size array to a reduction that has no identity")
    ov = ctx.fresh("ov")
    ctx.line(f"{ov} = {reshaped(ctx, out, tuple_expr(dims[a] for a in kept))}")
    iv = [ctx.fresh("i") for _ in range(ndim)]
    n_suffix = 0
    while n_suffix < ndim and (ndim - 1 - n_suffix) in axes:
        n_suffix += 1
    lead = ndim - n_suffix
    lead_reduced = any(a in axes for a in range(lead))
    kidx = _index([iv[a] for a in kept])
    work = ctx.program.pool_work(ctx.step.index)  # (the scheduler's pools.py)
    if work is not None and lead == 0 and ndim and elements.splits_rows():
        _emit_in_parts(op, ctx, elements, ov, work)
        return
    if lead_reduced or n_suffix == 0:  # the output accumulates: start from the identity
        flat, k = ctx.fresh("of"), ctx.fresh("k")
        ctx.line(f"{flat} = {reshaped(ctx, out, f'{out}.size')}")
        ctx.line(f"for {k} in range({out}.size):")
        with ctx.indent():
            ctx.line(f"{flat}[{k}] = {_identity(op, out_dtype)}")
    # rows of the first axis on the pool (schedule/pools.py), each output element its own
    pooled = work is not None and parallel_rows() and lead and n_suffix and not lead_reduced
    start = len(ctx.em.lines)
    for a in range(lead):
        ctx.line(f"for {iv[a]} in range({'lo, hi' if pooled and a == 0 else dims[a]}):")
        ctx.em.depth += 1
    if n_suffix:  # each output element from a loop nest of its own
        result = _accumulate(ctx, op, out_dtype, dims[lead:],
                             lambda inner: elements.read(iv[:lead] + inner))
        if lead_reduced:
            prev = ctx.fresh("t")
            ctx.line(f"{prev} = {ov}{kidx}")
            result = _combine(op, prev, result, out_dtype, ctx)
        ctx.line(f"{ov}{kidx} = {_stored(ctx, result, out_dtype)}")
    else:
        prev, t = ctx.fresh("t"), ctx.fresh("t")
        ctx.line(f"{t} = {elements.read(iv)}")
        ctx.line(f"{prev} = {ov}{kidx}")
        combined = _combine(op, prev, t, out_dtype, ctx)
        ctx.line(f"{ov}{kidx} = {_stored(ctx, combined, out_dtype)}")
    ctx.em.depth -= lead
    if pooled:
        pool_lines_since(ctx, start, dims[0], " * ".join(dims), work)


def _accumulating(op, out_dtype: str) -> str:
    """The dtype reduction `op` accumulates in: float32 sums in float64 (closer to numpy's
    pairwise summation), the others in the output's."""
    return "float64" if isinstance(op, Sum) and out_dtype == "float32" else out_dtype


def _accumulate(ctx, op, out_dtype: str, dims: list[str], read) -> str:
    """A loop nest over `dims` reducing `read(indices)` with `op` into a fresh local, whose
    name it returns (in _accumulating's dtype): float max/min through integer order keys
    (see start_order_reduction), the others with _combine from the identity."""
    acc, t = ctx.fresh("acc"), ctx.fresh("t")
    acc_dtype = _accumulating(op, out_dtype)
    keyed = isinstance(op, (Max, Min)) and out_dtype in ("float32", "float64")
    if keyed:
        order = start_order_reduction(ctx, op, out_dtype, acc)
    else:
        ctx.line(f"{acc} = {_identity(op, acc_dtype)}")
    iv = [ctx.fresh("i") for _ in dims]
    for var, dim in zip(iv, dims):
        ctx.line(f"for {var} in range({dim}):")
        ctx.em.depth += 1
    ctx.line(f"{t} = {read(iv)}")
    if keyed:
        order_update(ctx, order, acc, t)
    else:
        ctx.line(f"{acc} = {_combine(op, acc, t, acc_dtype, ctx)}")
    ctx.em.depth -= len(dims)
    if not keyed:
        return acc
    done = ctx.fresh("t")
    ctx.line(f"{done} = {order_result(order, acc)}")
    return done


def _emit_in_parts(op, ctx, elements, ov: str, work: int) -> None:
    """A reduction over all axes in parts along the first axis (schedule/pools.py): each part
    reduced on its own into an array of partial results, on the thread pool where there is
    one (`work` eighths of a unit per element), then the partials combined in order. The
    parts follow the shape alone, so threads or none give the same result."""
    out_dtype = ctx.node.outputs[0].dtype
    dims = elements.dims
    part_dtype = _accumulating(op, out_dtype)
    size = " * ".join(f"{d}" for d in dims)
    n, partial = ctx.fresh("nparts"), ctx.fresh("pr")
    ctx.line(f"{n} = {reduction_parts(dims[0], size)}")
    ctx.line(f"{partial} = {empty_expr(ctx.src, f'({n},)', part_dtype)}")
    start, pooled = len(ctx.em.lines), parallel_rows()
    p, s0, s1 = ctx.fresh("part"), ctx.fresh("cut"), ctx.fresh("cut")
    ctx.line(f"for {p} in range({'lo, hi' if pooled else n}):")
    with ctx.indent():
        ctx.line(f"{s0} = {dims[0]} * {p} // {n}")
        ctx.line(f"{s1} = {dims[0]} * ({p} + 1) // {n}")
        part = elements.rows(s0, s1)
        ctx.line(f"{partial}[{p}] = {_accumulate(ctx, op, out_dtype, part.dims, part.read)}")
    if pooled:
        pool_lines_since(ctx, start, n, size, work)
    total, q = ctx.fresh("acc"), ctx.fresh("q")
    ctx.line(f"{total} = {partial}[0]")
    ctx.line(f"for {q} in range(1, {n}):")
    with ctx.indent():
        ctx.line(f"{total} = {_combine(op, total, f'{partial}[{q}]', part_dtype, ctx)}")
    ctx.line(f"{ov}[()] = {_stored(ctx, total, out_dtype)}")


# Argmax/Argmin of a row of floats or integers in blocks: each block's extremum is an order-key
# reduction LLVM vectorizes (as Max's), a block holding a NaN answers with its first NaN
# (numpy's), a block whose extremum beats the best so far (strictly: the first of equals wins)
# becomes the best, and the answer is the least index in the best block holding its
# extremum (float ==: -0.0 and 0.0 tie, as under numpy's comparisons). The loop of scalar
# compares it replaces ran at ~4 ns per element (18 ms for 4096 x 1024 float32, numpy 0.34 ms).
ARG_BLOCK = 256


@_jit_inline
def _same(x):
    return x


def _arg_extremum(name: str, key, value, greater: bool):
    def row(x):
        best, best_block = x[0], 0
        for start in range(0, x.shape[0], ARG_BLOCK):
            block = x[start:start + ARG_BLOCK]  # (a loop from 0 over a view vectorizes)
            acc = key(block[0])
            nan = False
            for k in range(block.shape[0]):
                q = key(block[k])
                if greater:
                    acc = q if q > acc else acc
                else:
                    acc = q if q < acc else acc
                nan = nan | (block[k] != block[k])
            if nan:
                for k in range(block.shape[0]):
                    if block[k] != block[k]:
                        return start + k
            m = value(acc)
            if start == 0 or (m > best if greater else m < best):
                best, best_block = m, start
        block = x[best_block:best_block + ARG_BLOCK]
        first = block.shape[0]  # (the least k holding it: a select and a min, vectorized)
        for k in range(block.shape[0]):
            hit = k if block[k] == best else block.shape[0]
            first = hit if hit < first else first
        return best_block + first

    row.__name__ = row.__qualname__ = name
    return register_helper(numba.njit(error_model="numpy")(row))


_ARG_ROWS = {(kind, greater): _arg_extremum(f"arg{'max' if greater else 'min'}_{kind}", k, v,
                                            greater)
             for kind, k, v in (("f32", order_key32, order_value32),
                                ("f64", order_key64, order_value64), ("int", _same, _same))
             for greater in (True, False)}


def _arg_row_helper(ctx, op, dtype: str):
    """The blocked row helper of Argmax/Argmin `op` over `dtype`, or None (float16, complex
    and bool rows keep the loop of compares)."""
    kind = {"float32": "f32", "float64": "f64"}.get(dtype)
    if kind is None and np.dtype(dtype).kind in "iu":
        kind = "int"
    if kind is None:
        return None
    fn = _ARG_ROWS[kind, not isinstance(op, Argmin)]
    return ctx.helper(fn.py_func.__name__, fn)


@emit.register(Argmax)
def _emit_argmax(op, ctx) -> None:
    x = ctx.inp(0)
    ndim = ctx.input_var(0).ndim
    cmp = "<" if isinstance(op, Argmin) else ">"
    axes = range(ndim) if op.axis is None else (op.axis,)
    if op.keepdims:
        dims = ["1" if a in axes else f"{x}.shape[{a}]" for a in range(ndim)]
    else:
        dims = [f"{x}.shape[{a}]" for a in range(ndim) if a not in axes]
    out = ctx.alloc(0, "(" + "".join(f"{d}, " for d in dims) + ")")
    if op.axis is None:
        ctx.fail_if(f"{x}.size == 0", "ValueError",
                    f"{op}: attempt to get the index of an extremum of an empty sequence")
        flat = ctx.fresh("xf")
        src = x if ctx.is_contiguous(0) else ctx.contiguous(x)
        ctx.line(f"{flat} = {reshaped(ctx, src, f'{x}.size')}")
        length, kept, reads = f"{x}.size", [], lambda k: f"{flat}[{k}]"
        iv = []
    else:
        a = op.axis
        ctx.fail_if(f"{x}.shape[{a}] == 0", "ValueError",
                    f"{op}: attempt to get the index of an extremum of an empty sequence")
        kept = [d for d in range(ndim) if d != a]
        iv = [ctx.fresh("i") for _ in range(ndim)]

        def reads(k):
            return f"{x}[{', '.join(k if d == a else iv[d] for d in range(ndim))}]"
        length = f"{x}.shape[{a}]"
    ov = ctx.fresh("ov")
    ctx.line(f"{ov} = {reshaped(ctx, out, tuple_expr(f'{x}.shape[{d}]' for d in kept))}")
    # the rows of the first kept axis shared out on the pool (the scheduler's pools.py)
    work = ctx.pool_work() if kept else None
    start = len(ctx.em.lines)
    for n, d in enumerate(kept):
        bounds = "lo, hi" if work is not None and n == 0 else f"{x}.shape[{d}]"
        ctx.line(f"for {iv[d]} in range({bounds}):")
        ctx.em.depth += 1
    _emit_arg_body(op, ctx, flat if op.axis is None else None, reads, length, ov,
                   _index([iv[d] for d in kept]), cmp)
    ctx.em.depth -= len(kept)
    if work is not None:
        pool_lines_since(ctx, start, f"{x}.shape[{kept[0]}]", f"{x}.size", work)


def _emit_arg_body(op, ctx, flat, reads, length: str, ov: str, index: str, cmp: str) -> None:
    """The index of the extremum of one row (`reads(k)` its element k; a whole flattened
    input `flat`) stored at `ov[index]`: the blocked helper, or a loop of compares."""
    helper = _arg_row_helper(ctx, op, ctx.input_var(0).dtype)
    if helper is not None:
        row = flat if flat is not None else reads(":")
        ctx.line(f"{ov}{index} = {helper}({row})")
        return
    best, bi, k, v = ctx.fresh("best"), ctx.fresh("bi"), ctx.fresh("k"), ctx.fresh("t")
    ctx.line(f"{best} = {reads('0')}")
    ctx.line(f"{bi} = 0")
    ctx.line(f"for {k} in range(1, {length}):")
    with ctx.indent():
        kind = np.dtype(ctx.input_var(0).dtype).kind
        if kind in "fc":  # the first NaN is the answer (numpy)
            ctx.line(f"if {best} != {best}:")
            with ctx.indent():
                ctx.line("break")
        ctx.line(f"{v} = {reads(k)}")
        nan = f" or {v} != {v}" if kind in "fc" else ""
        if kind == "c":  # lexicographic
            less = ctx.helper("complex_lt", HELPER_REFS["complex_lt"])
            better = f"{less}({best}, {v})" if cmp == ">" else f"{less}({v}, {best})"
        else:
            better = f"{v} {cmp} {best}"
        ctx.line(f"if {better}{nan}:")
        with ctx.indent():
            ctx.line(f"{best} = {v}")
            ctx.line(f"{bi} = {k}")
    ctx.line(f"{ov}{index} = {bi}")


@emit.register(CumSum)
def _emit_cumsum(op, ctx) -> None:
    x = ctx.inp(0)
    ndim = ctx.input_var(0).ndim
    dtype = ctx.node.outputs[0].dtype
    if op.axis is None:
        out = ctx.alloc(0, f"({x}.size,)")
        flat, acc, k = ctx.fresh("xf"), ctx.fresh("acc"), ctx.fresh("k")
        src = x if ctx.is_contiguous(0) else ctx.contiguous(x)
        ctx.line(f"{flat} = {reshaped(ctx, src, f'{x}.size')}")
        # -0.0 + v is v: the first element is kept as it is (numpy's accumulate); a complex
        # one's parts both (-0.0 alone is (-0+0j): an imaginary -0.0 came out 0.0, seed 17010)
        kind = np.dtype(dtype).kind
        start = complex(-0.0, -0.0) if kind == "c" else -0.0 if kind == "f" else 0
        ctx.line(f"{acc} = {literal(start, dtype)}")
        ctx.line(f"for {k} in range({x}.size):")
        with ctx.indent():
            total = arith(ctx, "+", acc, f"{np_dtype(dtype)}({flat}[{k}])", dtype)
            ctx.line(f"{acc} = {_stored(ctx, total, dtype)}")
            ctx.line(f"{out}[{k}] = {acc}")
        return
    out = ctx.alloc(0, "(" + "".join(f"{x}.shape[{d}], " for d in range(ndim)) + ")")
    iv = [ctx.fresh("i") for _ in range(ndim)]
    for d in range(ndim):
        ctx.line(f"for {iv[d]} in range({x}.shape[{d}]):")
        ctx.em.depth += 1
    a = op.axis
    idx = ", ".join(iv)
    prev = ", ".join(f"{iv[d]} - 1" if d == a else iv[d] for d in range(ndim))
    t = ctx.fresh("t")
    ctx.line(f"{t} = {np_dtype(dtype)}({x}[{idx}])")
    ctx.line(f"if {iv[a]} > 0:")
    with ctx.indent():
        ctx.line(f"{t} = {_stored(ctx, arith(ctx, '+', t, f'{out}[{prev}]', dtype), dtype)}")
    ctx.line(f"{out}[{idx}] = {t}")
    ctx.em.depth -= ndim


_ = (Max, Min)
