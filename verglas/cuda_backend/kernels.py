"""CUDA kernels: per op class, the host code a step contributes and the kernels it launches.

`emit(op, ctx)` is a singledispatch function, as in the CPU backend; each emitter writes host
lines through the StepContext (codegen.py) and registers kernel sources built by templates.py.
An op without an emitter (or an emitter raising NotImplementedError before writing anything
it keeps) falls back to its reference `perform` on host copies.
"""

from __future__ import annotations

import functools


from verglas.cuda_backend import templates as T
from verglas.ops.basic import DimShuffle, Join
from verglas.ops.elemwise import Elemwise, SumToShape
from verglas.ops.indexing import AdvancedIncSubtensor, AdvancedSubtensor, IncSubtensor, Subtensor
from verglas.ops.linalg import MatMul
from verglas.ops.reduce import All, Any, Argmax, Argmin, CumSum, Max, Min, Prod, Reduce, Sum
from verglas.ops.shape import ARange, Alloc, Reshape

__all__ = ["emit", "output_storage"]

_ATOMIC_ADD = ("float32", "float64", "int32", "int64", "uint32", "uint64")
_PART_DTYPE = {"complex64": "float32", "complex128": "float64"}
_ACCUMULATE_IN = {"bool": "int32", "int8": "int32", "int16": "int32", "uint8": "uint32",
                  "uint16": "uint32", "float16": "float32"}


@functools.singledispatch
def emit(op, ctx) -> None:
    raise NotImplementedError(f"cuda backend: no kernel for {op} ({type(op).__name__})")


def _tuple(items) -> str:
    items = list(items)
    return "(" + "".join(f"{i}, " for i in items) + ")"


def _all_ones(var) -> bool:
    return all(d == 1 for d in var.type.shape)


def _operands(ctx):
    """Kernel operand kinds of the step's inputs and what the host passes for each:
    (kinds, arrays, extras) with arrays[k] an array name (or "None") and extras[k] a ready
    argument (or "None" for arrays taking the loop's shape)."""
    kinds, arrays, extras = [], [], []
    checked = set()
    for i, var in enumerate(ctx.node.inputs):
        data = ctx.constant_value(i)
        dtype = var.type.dtype
        index = ctx.step.element_index(i)
        if index is not None:  # one element of an array, read in the kernel
            base = ctx.dev(i)
            if (base, index) not in checked:
                checked.add((base, index))
                ctx.line(f"H.check_index({str(ctx.op)!r}, {base}.shape, {index!r})")
            kinds.append(("at", dtype, len(index), ", ".join(map(str, index))))
            arrays.append("None")
            extras.append(base)
            continue
        if data is not None and data.size == 1 and _all_ones(var):
            kinds.append(("lit", dtype, T.literal(data.reshape(()), dtype)))
            continue
        if var.ndim == 0 and ctx.on_host(i) and not ctx.on_device(i) and dtype != "bool":
            kinds.append(("arg", dtype))
            arrays.append("None")
            extras.append(f"H.scalar({ctx.host(i)}, {dtype!r})")
        elif _all_ones(var):
            kinds.append(("one", dtype))
            arrays.append("None")
            extras.append(f"{ctx.dev(i)}.reshape(1)")
        else:
            kinds.append(("array", dtype))
            arrays.append(ctx.dev(i))
            extras.append("None")
    return kinds, arrays, extras


def _loop_shape(ctx, kinds, arrays, ndim: int) -> str:
    """Emit the broadcast shape of the operands; return its name."""
    shapes = [f"{a}.shape" for a, k in zip(arrays, [k for k in kinds if k[0] != "lit"])
              if k[0] == "array"]
    s = ctx.fresh("s")
    if shapes:
        ctx.line(f"{s} = H.broadcast_shape({str(ctx.op)!r}, {', '.join(shapes)})")
    else:
        ctx.line(f"{s} = {_tuple(['1'] * ndim)}")
    return s


def _base_is_temp(program, bid: int) -> bool:
    buf = program.buffers[bid]
    while buf.view_of is not None or buf.takes_over is not None:
        buf = program.buffers[buf.view_of if buf.view_of is not None else buf.takes_over]
    return buf.kind == "temp"


def output_storage(ctx, j: int, shape: str) -> str:
    """Storage for output j: its inplace target when that is our own temporary, else new."""
    buf = ctx.program.buffers[ctx.step.outputs[j]]
    target = buf.takes_over
    if target is not None and _base_is_temp(ctx.program, target) \
            and ctx.gen.dev_name.get(target, "").startswith("b"):
        ctx.line(f"{ctx.out(j)} = {ctx.gen.dev_name[target]}")
        return ctx.set_device(j)
    return ctx.alloc(j, shape)


# -- Elemwise ------------------------------------------------------------------------------------
@emit.register(Elemwise)
def _emit_elemwise(op, ctx) -> None:
    node = ctx.node
    ndim = node.outputs[0].ndim
    kinds, arrays, extras = _operands(ctx)
    out_dtypes = [o.type.dtype for o in node.outputs]
    flat = ctx.kernel(T.map_kernel(ctx.kname("flat"), op.scalar_op, kinds, out_dtypes, 1, True))
    strided = flat if ndim == 0 else ctx.kernel(
        T.map_kernel(ctx.kname("map"), op.scalar_op, kinds, out_dtypes, ndim, False))
    s = _loop_shape(ctx, kinds, arrays, ndim)
    outs = [output_storage(ctx, j, s) for j in range(len(node.outputs))]
    ctx.line(f"H.run_map(L, {flat}, {strided}, {s}, {_tuple(outs)}, {_tuple(arrays)}, "
             f"{_tuple(extras)})")


# -- views: metadata steps on the host -----------------------------------------------------------
@emit.register(DimShuffle)
@emit.register(Reshape)
@emit.register(Subtensor)
def _emit_view(op, ctx) -> None:
    ctx.emit_perform(on_host=False)


# -- reductions ----------------------------------------------------------------------------------
def _reduction(ctx, kind: str, kinds, arrays, extras, sop, in_dtype, nd: int, views: list[str],
               nk: int, nr: int, m: str, k: str, out: str) -> None:
    out_dtype = ctx.node.outputs[0].type.dtype
    red = T.REDUCERS(kind, in_dtype, out_dtype)
    t = ctx.threads
    rows = ctx.kernel(T.reduce_rows_kernel(ctx.kname("rows"), red, sop, kinds, in_dtype,
                                           out_dtype, nk, nr, t))
    cols = "None"
    if nk > 0:
        cols = ctx.kernel(T.reduce_cols_kernel(ctx.kname("cols"), red, sop, kinds, in_dtype,
                                               out_dtype, nk, nr))
    final = ctx.kernel(T.reduce_rows_kernel(
        ctx.kname("final"), T.REDUCERS(kind, out_dtype, out_dtype), None,
        [("array", out_dtype)], out_dtype, out_dtype, 1, 1, t))
    it = iter(views)
    args = [next(it) if a != "None" else e for a, e in zip(arrays, extras)]
    ctx.line(f"H.run_reduce(L, {rows}, {cols}, {final}, {out}.reshape(-1), {_tuple(args)}, "
             f"{views[0]}, {nk}, {m}, {k}, {out_dtype!r})")


def _product(shape: str, axes) -> str:
    return f"H.size({_tuple(f'{shape}[{a}]' for a in axes)})"


_REDUCER = {Sum: "sum", Prod: "prod", Max: "max", Min: "min", Any: "any", All: "all"}


@emit.register(Reduce)
def _emit_reduce(op, ctx) -> None:
    kind = _REDUCER[type(op)]
    x = ctx.node.inputs[0]
    nd = x.ndim
    producer = getattr(ctx, "producer", None)
    if producer is not None:
        pctx = ctx.for_step(producer)
        kinds, arrays, extras = _operands(pctx)
        sop = producer.node.op.scalar_op
        s = _loop_shape(pctx, kinds, arrays, nd)
    else:
        kinds, arrays, extras, sop = [("array", x.type.dtype)], [ctx.dev(0)], ["None"], None
        s = ctx.fresh("s")
        ctx.line(f"{s} = {arrays[0]}.shape")
    kept = [a for a in range(nd) if a not in op.axis]
    if op.keepdims:
        out_shape = _tuple("1" if a in op.axis else f"{s}[{a}]" for a in range(nd))
    else:
        out_shape = _tuple(f"{s}[{a}]" for a in kept)
    out = ctx.alloc(0, out_shape)
    m, k = ctx.fresh("m"), ctx.fresh("k")
    ctx.line(f"{m} = {_product(s, kept)}")
    ctx.line(f"{k} = {_product(s, op.axis)}")
    if not op.has_identity:
        ctx.line(f"if {k} == 0:")  # (numpy raises whatever the result's size, seed 27149)
        with ctx.indent():
            ctx.line(f"raise ValueError({str(op) + ': zero-size reduction has no identity'!r})")
    order = _tuple(kept + list(op.axis))
    views = []
    for a in arrays:
        if a == "None":
            continue
        v = ctx.fresh("v")
        if nd == 0:
            ctx.line(f"{v} = {a}.reshape(1)")
        elif producer is not None:
            ctx.line(f"{v} = L.xp.broadcast_to({a}, {s}).transpose({order})")
        else:
            ctx.line(f"{v} = {a}.transpose({order})")
        views.append(v)
    nk, nr = (1, 0) if nd == 0 else (len(kept), len(op.axis))
    _reduction(ctx, kind, kinds, arrays, extras, sop, x.type.dtype, nd, views, nk, nr, m, k, out)


@emit.register(SumToShape)
def _emit_sum_to_shape(op, ctx) -> None:
    g = ctx.node.inputs[0]
    nd = g.ndim
    if nd == 0:
        raise NotImplementedError("SumToShape of a 0-d array")
    x, shp = ctx.dev(0), ctx.host(1)
    tgt, red = ctx.fresh("tgt"), ctx.fresh("red")
    ctx.line(f"{tgt} = H.sum_to_target({str(op)!r}, {x}.shape, {shp})")
    ctx.line(f"{red} = tuple(t == 1 and n != 1 for t, n in zip({tgt}, {x}.shape))")
    out = ctx.alloc(0, tgt)
    m, k, v = ctx.fresh("m"), ctx.fresh("k"), ctx.fresh("v")
    ctx.line(f"{m} = H.size({tgt})")
    ctx.line(f"{k} = H.size({x}.shape) // max({m}, 1)")
    ctx.line(f"{v} = H.split_view(L, {x}, {red})")
    _reduction(ctx, "sum", [("array", g.type.dtype)], [x], ["None"], None, g.type.dtype, nd,
               [v], nd, nd, m, k, out)


@emit.register(Argmax)
def _emit_arg(op, ctx) -> None:
    x = ctx.node.inputs[0]
    nd = x.ndim
    a = ctx.dev(0)
    axes = list(range(nd)) if op.axis is None else [op.axis]
    kept = [d for d in range(nd) if d not in axes]
    if op.keepdims:
        shape = _tuple("1" if d in axes else f"{a}.shape[{d}]" for d in range(nd))
    else:
        shape = _tuple(f"{a}.shape[{d}]" for d in kept)
    out = ctx.alloc(0, shape)
    largest = not isinstance(op, Argmin)
    if nd == 0:
        view, nk, nr = f"{a}.reshape(1)", 0, 1
    else:
        view, nk, nr = f"{a}.transpose({_tuple(kept + axes)})", len(kept), len(axes)
    kern = ctx.kernel(T.arg_kernel(ctx.kname("arg"), x.type.dtype, largest, nk, nr,
                                   ctx.threads))
    split = ctx.kernel(T.arg_kernel(ctx.kname("argsplit"), x.type.dtype, largest, nk, nr,
                                    ctx.threads, split=True))
    pick = ctx.kernel(T.arg_kernel(ctx.kname("argpick"), x.type.dtype, largest, 1, 1,
                                   ctx.threads))
    ctx.line(f"H.run_arg(L, {kern}, {out}.reshape(-1), {view}, "
             f"{_product(f'{a}.shape', kept)}, {_product(f'{a}.shape', axes)}, {str(op)!r}, "
             f"{split}, {pick})")


@emit.register(CumSum)
def _emit_cumsum(op, ctx) -> None:
    x = ctx.node.inputs[0]
    out_dtype = ctx.node.outputs[0].type.dtype
    a = ctx.dev(0)
    if op.axis is None:
        out = ctx.alloc(0, f"({a}.size,)")
        xv, ov, rank = f"{a}.reshape(-1)", out, 1
    else:
        out = ctx.alloc(0, f"{a}.shape")
        xv, ov = f"H.move_last({a}, {op.axis})", f"H.move_last({out}, {op.axis})"
        rank = x.ndim
    kern = ctx.kernel(T.cumsum_kernel(ctx.kname("cumsum"), x.type.dtype, out_dtype, rank))
    ctx.line(f"H.run_cumsum(L, {kern}, {ov}, {xv})")


# -- matmul: cuBLAS through cupy (numpy under the simulator), a host-side library call -----------
@emit.register(MatMul)
def _emit_matmul(op, ctx) -> None:
    ctx.src.has_matmul = True
    dtype = ctx.node.outputs[0].type.dtype
    ctx.line(f"{ctx.set_device(0)} = L.matmul({ctx.dev(0)}, {ctx.dev(1)}, {dtype!r})")


# -- constructors --------------------------------------------------------------------------------
def _copy(ctx, src_dtype: str, dst_dtype: str, rank: int, mode: str = "set") -> str:
    return ctx.kernel(T.copy_kernel(ctx.kname(f"copy{mode}"), src_dtype, dst_dtype,
                                    max(rank, 1), mode))


@emit.register(Alloc)
def _emit_alloc(op, ctx) -> None:
    value = ctx.node.inputs[0]
    out_var = ctx.node.outputs[0]
    dims = _tuple(f"int({ctx.host(i)})" for i in range(1, len(ctx.node.inputs)))
    out = ctx.alloc(0, dims)
    kern = _copy(ctx, value.type.dtype, out_var.type.dtype, out_var.ndim)
    ctx.line(f"H.copy_into(L, {kern}, {out}, {ctx.dev(0)}, 'Alloc')")


@emit.register(Join)
def _emit_join(op, ctx) -> None:
    out_var = ctx.node.outputs[0]
    xs = [ctx.dev(i) for i in range(len(ctx.node.inputs))]
    s = ctx.fresh("s")
    ctx.line(f"{s} = H.join_shape({str(op)!r}, {op.axis}, {_tuple(x + '.shape' for x in xs)})")
    out = ctx.alloc(0, s)
    off = ctx.fresh("off")
    ctx.line(f"{off} = 0")
    for x, var in zip(xs, ctx.node.inputs):
        kern = _copy(ctx, var.type.dtype, out_var.type.dtype, out_var.ndim)
        part = f"{out}[{'(slice(None),) * ' + str(op.axis) + ' + ' if op.axis else ''}" \
               f"(slice({off}, {off} + {x}.shape[{op.axis}]),)]"
        ctx.line(f"H.copy_into(L, {kern}, {part}, {x}, {str(op)!r})")
        ctx.line(f"{off} += {x}.shape[{op.axis}]")


@emit.register(ARange)
def _emit_arange(op, ctx) -> None:
    n, start, delta = ctx.fresh("n"), ctx.fresh("start"), ctx.fresh("delta")
    ctx.line(f"{n}, {start}, {delta} = H.arange_params({ctx.host(0)}, {ctx.host(1)}, "
             f"{ctx.host(2)}, {op.dtype!r}, {str(op)!r})")
    out = ctx.alloc(0, f"({n},)")
    kern = ctx.kernel(T.arange_kernel(ctx.kname("arange"), op.dtype))
    ctx.line(f"if {n}:")
    with ctx.indent():
        ctx.line(f"{kern}(H.blocks(L, {n}), L.threads, {out}, {start}, {delta}, {n})")


# -- indexing ------------------------------------------------------------------------------------
def _basic_rank(idx_list, ndim: int) -> int:
    return ndim - sum(1 for e in idx_list if e == "int") + sum(1 for e in idx_list
                                                               if e == "newaxis")


@emit.register(IncSubtensor)
def _emit_inc_subtensor(op, ctx) -> None:
    x, v = ctx.node.inputs[:2]
    xa, va = ctx.dev(0), ctx.dev(1)
    values = _tuple(ctx.host(i) for i in range(2, len(ctx.node.inputs)))
    out = ctx.alloc(0, f"{xa}.shape")
    ctx.line(f"H.copy_into(L, {_copy(ctx, x.type.dtype, x.type.dtype, x.ndim)}, {out}, {xa}, "
             f"{str(op)!r})")
    view = ctx.fresh("view")
    ctx.line(f"{view} = H.basic_index({out}, {op.idx_list!r}, {values}, {str(op)!r})")
    mode = "set" if op.set_instead_of_inc else "add"
    kern = _copy(ctx, v.type.dtype, x.type.dtype, _basic_rank(op.idx_list, x.ndim), mode)
    ctx.line(f"H.copy_into(L, {kern}, {view}, {va}, {str(op)!r})")


def _advanced_plan(op, x, index_vars):
    """(entries per indexed axis, slice-only idx_list, block position, block rank), or raise
    NotImplementedError for structures the kernel does not cover (bool masks, newaxis, ...)."""
    entries, basic = [], []
    adv_pos, n_slices, first = [], 0, None
    it = iter(index_vars)
    axis = 0
    for e in op.idx_list:
        if e in ("newaxis", "..."):
            raise NotImplementedError(f"{op}: newaxis/ellipsis in an advanced index")
        if e == "array":
            var = next(it)
            if var.type.dtype == "bool":  # a k-d mask: k index arrays, its nonzero() (1-d)
                if var.ndim == 0:
                    raise NotImplementedError(f"{op}: 0-d boolean index")
                entries += [("array", "int64", 1)] * var.ndim
                basic += [("slice", False, False, False)] * var.ndim
                adv_pos += range(axis, axis + var.ndim)
                axis += var.ndim
                first = n_slices if first is None else first
                continue
            entries.append(("array", var.type.dtype, var.ndim))
            basic.append(("slice", False, False, False))
        elif e == "int":
            next(it)
            entries.append(("int",))
            basic.append(("slice", False, False, False))
        else:
            for _ in range(sum(e[1:])):
                next(it)
            entries.append(("slice",))
            basic.append(e)
            n_slices += 1
            axis += 1
            continue
        adv_pos.append(axis)
        axis += 1
        first = n_slices if first is None else first
    entries += [("slice",)] * (x.ndim - len(entries))
    block_rank = max(e[2] for e in entries if e[0] == "array")
    adjacent = adv_pos == list(range(adv_pos[0], adv_pos[0] + len(adv_pos)))
    at = first if adjacent else 0
    out_rank = sum(1 for e in entries if e[0] == "slice") + block_rank
    if block_rank == 0 or out_rank == 0:
        raise NotImplementedError(f"{op}: 0-d index arrays")
    return [e[:2] for e in entries], tuple(basic), at, block_rank, out_rank


def _emit_advanced(op, ctx, scatter: str | None) -> None:
    first_index = 1 if scatter is None else 2
    x = ctx.node.inputs[0]
    index_vars = ctx.node.inputs[first_index:]
    entries, basic, at, block_rank, out_rank = _advanced_plan(op, x, index_vars)
    # an add into a dtype with no atomic add accumulates in a wider one that has it (integer
    # wraparound and bool's "or" come out the same; float16 rounds once, not per add)
    acc = x.type.dtype if scatter != "add" else _ACCUMULATE_IN.get(x.type.dtype, x.type.dtype)
    # a complex add: its real and imaginary parts added as floats, through views
    parts = scatter == "add" and x.type.dtype in _PART_DTYPE
    v_dtype = ctx.node.inputs[1].type.dtype if scatter else None
    if parts:
        acc, v_dtype = _PART_DTYPE[x.type.dtype], _PART_DTYPE.get(v_dtype, v_dtype)
    if scatter == "add" and acc not in _ATOMIC_ADD:
        raise NotImplementedError(f"{op}: no atomic add for {x.type.dtype}")

    def index_kernel(mode, kind, dtype):
        return ctx.kernel(T.index_kernel(
            ctx.kname(kind), mode, dtype, v_dtype if mode else None,
            x.ndim, entries, out_rank, at, block_rank))

    kern = index_kernel(scatter, "scatter" if scatter else "gather", acc)
    xa = ctx.dev(0)
    out = None
    if scatter is not None:  # the result starts as a copy of x
        out = ctx.alloc(0, f"{xa}.shape")
        ctx.line(f"H.copy_into(L, {_copy(ctx, x.type.dtype, x.type.dtype, x.ndim)}, {out}, "
                 f"{xa}, {str(op)!r})")
        xa = out
        if acc != x.type.dtype and not parts:
            wide = ctx.fresh("wide")
            ctx.line(f"{wide} = L.empty({out}.shape, {acc!r})")
            ctx.line(f"H.copy_into(L, {_copy(ctx, x.type.dtype, acc, x.ndim)}, {wide}, {out}, "
                     f"{str(op)!r})")
            xa = wide
    # slices first, as a basic view; then the index arrays and ints
    values, arrays, ints = [], [], []
    it = iter(range(first_index, len(ctx.node.inputs)))
    axis = 0
    for e in op.idx_list:
        if e == "array":
            i = next(it)
            var = ctx.node.inputs[i]
            if var.type.dtype == "bool":  # compacted on the device, its length read back
                nz = ctx.fresh("nz")
                ctx.line(f"{nz} = H.mask_indices(L, {ctx.dev(i)}, {xa}.shape, {axis}, "
                         f"{str(op)!r})")
                ctx.src.syncs = True
                arrays.extend(f"{nz}[{j}]" for j in range(var.ndim))
                ints.extend([None] * var.ndim)
                axis += var.ndim
                continue
            arrays.append(ctx.dev(i))
            ints.append(None)
            axis += 1
        elif e == "int":
            ints.append(f"H.scalar({ctx.host(next(it))}, 'int64')")
            axis += 1
        else:
            values.extend(ctx.host(next(it)) for _ in range(sum(e[1:])))
            axis += 1
    xv = ctx.fresh("xv")
    ctx.line(f"{xv} = H.basic_index({xa}, {basic!r}, {_tuple(values)}, {str(op)!r})")
    shape, ixa = ctx.fresh("shape"), ctx.fresh("ix")
    ctx.line(f"{shape}, {ixa} = H.index_args(L, {xv}, {_tuple(arrays)}, "
             f"{_tuple(i for i in ints if i is not None)}, {entries!r}, {at}, {str(op)!r})")
    if scatter is None:
        first = ctx.alloc(0, shape)
    else:
        first = ctx.fresh("vv")
        ctx.line(f"{first} = H.broadcast_value(L, {ctx.dev(1)}, {shape}, {str(op)!r})")
    if scatter == "set":  # the last value each element is given, as numpy's
        claim = index_kernel("claim", "claim", "int64")
        ctx.line(f"H.run_index_set(L, {claim}, {kern}, {first}, {xv}, {ixa}, {str(op)!r})")
    elif parts:
        for part in ("real", "imag"):
            ctx.line(f"H.run_index(L, {kern}, {first}.{part}, {xv}.{part}, {ixa}, {str(op)!r})")
    else:
        ctx.line(f"H.run_index(L, {kern}, {first}, {xv}, {ixa}, {str(op)!r})")
    if out is not None and acc != x.type.dtype and not parts:  # back from the accumulator
        ctx.line(f"H.copy_into(L, {_copy(ctx, acc, x.type.dtype, x.ndim)}, {out}, {xa}, "
                 f"{str(op)!r})")


@emit.register(AdvancedSubtensor)
def _emit_advanced_subtensor(op, ctx) -> None:
    _emit_advanced(op, ctx, None)


@emit.register(AdvancedIncSubtensor)
def _emit_advanced_inc_subtensor(op, ctx) -> None:
    _emit_advanced(op, ctx, "set" if op.set_instead_of_inc else "add")


