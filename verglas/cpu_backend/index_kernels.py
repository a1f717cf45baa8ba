"""CPU kernels of indexing: Subtensor (a numba view), AdvancedSubtensor, IncSubtensor and
AdvancedIncSubtensor.

Advanced indices are planned statically from `idx_list`: index arrays are bounds-checked and
normalized once (IndexError naming the op), boolean masks become integer arrays, the index
arrays are broadcast into one block, and a loop nest over the indexed shape reads (or writes)
the source position of every element. Iterating in C order gives numpy's semantics for
repeated indices: the last write wins for set, increments accumulate (np.add.at) for inc.
"""

from __future__ import annotations

import numba
import numpy as np

from verglas.cpu_backend.dtypes import cast_expr, storage_dtype
from verglas.cpu_backend.intrinsics import broadcast_length, c_contiguous, c_row, reshaped
from verglas.cpu_backend.kernels import arith, emit, register_helper
from verglas.ops.indexing import AdvancedIncSubtensor, AdvancedSubtensor, IncSubtensor, Subtensor
from verglas.source import all_of, any_of, tuple_expr

__all__ = []


@register_helper
@numba.njit(cache=False)
def _slice_range(n, start, has_start, stop, has_stop, step):
    """(first index, length) of slice start:stop:step over an axis of length n (Python rules)."""
    if step > 0:
        lo, hi = 0, n
    else:
        lo, hi = -1, n - 1
    if has_start:
        s = start + n if start < 0 else start
        s = lo if s < lo else (hi if s > hi else s)
    else:
        s = lo if step > 0 else hi
    if has_stop:
        e = stop + n if stop < 0 else stop
        e = lo if e < lo else (hi if e > hi else e)
    else:
        e = hi if step > 0 else lo
    if step > 0:
        length = (e - s + step - 1) // step
    else:
        length = (s - e - step - 1) // (-step)
    return s, max(length, 0)


@register_helper
@numba.njit(cache=False)
def _normalize_indices(idx, n):
    """(idx as int64 with negatives wrapped, whether every index is in [-n, n))."""
    out = np.empty(idx.shape, np.int64)
    src = c_contiguous(idx).reshape(idx.size)
    dst = out.reshape(idx.size)
    for k in range(idx.size):
        v = np.int64(src[k])
        if v < -n or v >= n:
            return out, False
        dst[k] = v + n if v < 0 else v
    return out, True


_INT64_MAX = np.iinfo(np.int64).max


def _int_of(ctx, k: int) -> str:
    """The int64 value of the 0-d integer input `k`: a uint64 beyond int64's range is int64's
    largest (numpy takes it as a Python int: out of bounds, or past a slice's end), not
    wrapped around to a negative index (seed 29384: x[2**64 - 2:3] was x[-2:3])."""
    name = ctx.inp(k)
    if ctx.input_var(k).dtype == "uint64":
        return f"np.int64(min({name}.item(), np.uint64({_INT64_MAX})))"
    return f"np.int64({name}.item())"


def _scalar_index(ctx, k: int, x: str, axis: int, op) -> str:
    """Emit a bounds-checked, wrapped integer index read from 0-d input `k`; return its
    name."""
    if ctx.input_var(k).dtype == "uint64":  # (numpy: an integer index must fit an int64)
        ctx.fail_if(f"{ctx.inp(k)}.item() > np.uint64({_INT64_MAX})",
                    "OverflowError", f"{op}: the index is too large to convert to an int64")
    i = ctx.fresh("ix")
    ctx.line(f"{i} = {_int_of(ctx, k)}")
    ctx.fail_if(any_of([f"{i} < -{x}.shape[{axis}]", f"{i} >= {x}.shape[{axis}]"]),
                "IndexError", f"{op}: index out of bounds for axis {axis}")
    ctx.line(f"if {i} < 0:")
    with ctx.indent():
        ctx.line(f"{i} += {x}.shape[{axis}]")
    return i


def _basic_index(ctx, op, x: str, first_input: int) -> list[str]:
    """Index expressions (ints, slices, None) of a basic `idx_list` over array `x`."""
    parts, k, axis = [], first_input, 0
    for entry in op.idx_list:
        if entry == "newaxis":
            parts.append("None")
            continue
        if entry == "int":
            parts.append(_scalar_index(ctx, k, x, axis, op))
            k += 1
        else:
            comps = []
            for j, given in enumerate(entry[1:]):
                if not given:
                    comps.append("")
                    continue
                c = ctx.fresh("sl")
                ctx.line(f"{c} = {_int_of(ctx, k)}")
                k += 1
                if j == 2:
                    ctx.fail_if(f"{c} == 0", "ValueError", f"{op}: slice step cannot be zero")
                comps.append(c)
            parts.append(":".join(comps))
        axis += 1
    return parts


@emit.register(Subtensor)
def _emit_subtensor(op, ctx) -> None:
    x, out = ctx.inp(0), ctx.out(0)
    parts = _basic_index(ctx, op, x, 1)
    if ctx.node.outputs[0].ndim == 0:  # numba returns a scalar: hold it in a 0-d array
        ctx.line(f"{out} = np.empty((), {x}.dtype)")
        ctx.line(f"{out}[()] = {x}[{', '.join(parts)}]")
        ctx.set_contiguous(0, True)
    elif set(parts) <= {"None", ":", "::"} and ctx.is_contiguous(0):
        # new axes of a C-contiguous array: a C view (numba types x[:, None, :] 'A', and a
        # loop over its last axis then neither vectorizes nor knows its stride: pairwise
        # distances ((a[:, None] - b[None]) ** 2).sum(-1) took 20 ms, as a view 4.4)
        kept = iter(range(ctx.input_var(0).ndim))
        dims = ["1" if part == "None" else f"{x}.shape[{next(kept)}]" for part in parts]
        dims += [f"{x}.shape[{a}]" for a in kept]
        ctx.line(f"{out} = {reshaped(ctx, x, tuple_expr(dims))}")
        ctx.set_contiguous(0, True)
    elif parts:
        ctx.line(f"{out} = {x}[{', '.join(parts)}]")
    else:
        ctx.line(f"{out} = {x}")
        ctx.set_contiguous(0, ctx.is_contiguous(0))


def _copy_input(ctx) -> str:
    """Allocate output 0 like input 0 and copy input 0 into it (an inplace step's output is
    input 0's own array: nothing to copy; a 10 MB embedding gradient copied itself)."""
    x = ctx.inp(0)
    ndim = ctx.input_var(0).ndim
    out = ctx.alloc(0, "(" + "".join(f"{x}.shape[{d}], " for d in range(ndim)) + ")")
    if ctx.program.buffers[ctx.step.outputs[0]].takes_over != ctx.step.inputs[0]:
        ctx.line(f"{out}[...] = {x}")
    return out


def _check_value(ctx, op, v: str, vndim: int, target: list[str]) -> None:
    """Emit a ValueError when value `v` does not broadcast to the shape `target`."""
    lead = len(target) - vndim
    for j in range(vndim):
        ctx.fail_if(all_of([f"{v}.shape[{j}] != 1", f"{v}.shape[{j}] != {target[lead + j]}"]),
                    "ValueError", f"{op}: the value cannot be broadcast to the indexed shape")


def _stored(ctx, op, target: str, val: str) -> str:
    """The value an update writes to `target`: `val`, or target + val, converted to x's dtype
    as numpy's setitem converts (a complex value keeps its real part, but is true as a bool
    where either part is nonzero; a float16 one is rounded to half precision)."""
    x_dtype, v_dtype = ctx.input_var(0).dtype, ctx.input_var(1).dtype
    if not op.set_instead_of_inc:
        v_dtype = np.result_type(x_dtype, v_dtype).name
        if v_dtype == x_dtype:
            val = arith(ctx, "+", target, cast_expr(val, x_dtype, ctx.src), x_dtype)
        else:
            val = f"{target} + {val}"
    if np.dtype(v_dtype).kind == "c" and np.dtype(x_dtype).kind not in "cb":
        val = f"({val}).real"  # (to bool: whether either part is nonzero, the cast's test)
    if v_dtype == x_dtype and x_dtype != "float16":
        return val
    return cast_expr(val, x_dtype, ctx.src)


@emit.register(IncSubtensor)
def _emit_inc_subtensor(op, ctx) -> None:
    out = _copy_input(ctx)
    v = ctx.inp(1)
    vndim = ctx.input_var(1).ndim
    parts = _basic_index(ctx, op, out, 2)
    consumed = sum(1 for e in op.idx_list if e != "newaxis")
    tndim = sum(1 for e in op.idx_list if e == "newaxis" or isinstance(e, tuple)) \
        + ctx.input_var(0).ndim - consumed
    if tndim == 0:
        target = f"{out}[{', '.join(parts)}]"
        ctx.line(f"{target} = {_stored(ctx, op, target, f'{v}.item()')}")
        return
    view = ctx.fresh("w")
    ctx.line(f"{view} = {out}[{', '.join(parts)}]" if parts else f"{view} = {out}")
    dims = [f"{view}.shape[{d}]" for d in range(tndim)]
    _check_value(ctx, op, v, vndim, dims)
    _update_loops(ctx, op, view, dims, v, vndim)


def _unshared_value(ctx, v: str, vndim: int) -> str:
    """Update value `v`, or a copy of it where it shares storage with the array the step
    updates in place: numpy updates as if from a copy, where loops reading `v` as they write
    would see their own writes (x[[0, 0]] += x added the updated x[0] again, seed 12243)."""
    program, step = ctx.program, ctx.step
    if program.buffers[step.outputs[0]].takes_over != step.inputs[0] or \
            program.storage_of(step.inputs[1]) is not program.storage_of(step.inputs[0]):
        return v
    copy = ctx.scratch(tuple_expr(f"{v}.shape[{d}]" for d in range(vndim)),
                       storage_dtype(ctx.input_var(1).dtype))
    loops = [ctx.fresh("i") for _ in range(vndim)]
    for d, i in enumerate(loops):
        ctx.line(f"for {i} in range({v}.shape[{d}]):")
        ctx.em.depth += 1
    index = ", ".join(loops) or "()"
    ctx.line(f"{copy}[{index}] = {v}[{index}]")
    ctx.em.depth -= vndim
    return copy


def _update_loops(ctx, op, view: str, dims: list[str], v: str, vndim: int) -> None:
    """view[...] = v (or += v), `v` broadcast, as loops over the view's elements.

    Not numba's `view[...] = view + v`: the loop numba makes of that array expression crashes
    LLVM's vectorizer (an assertion, the process aborts) where the view reverses an array of
    a length LLVM knows (fuzzer seed 11161: x[::-1] += x, x of static length 28). A value that
    may share storage with the view is copied first: numpy updates as if from a copy."""
    if vndim:
        v = _unshared_value(ctx, v, vndim)
    if vndim == 0:
        value = ctx.fresh("hv")
        ctx.line(f"{value} = {v}.item()")
    loops = [ctx.fresh("i") for _ in dims]
    static = ctx.input_var(1).type.shape
    lead = len(dims) - vndim
    index = []  # v's index expression per axis: the loop's, or 0 where v's length is 1
    for j in range(vndim):
        if static[j] == 1:
            index.append("0")
            continue
        step = ctx.fresh("sv")
        ctx.line(f"{step} = int({v}.shape[{j}] != 1)")
        index.append(f"{loops[lead + j]} * {step}")
    for d, i in zip(dims, loops):
        ctx.line(f"for {i} in range({d}):")
        ctx.em.depth += 1
    target = f"{view}[{', '.join(loops)}]"
    if vndim:
        value = f"{v}[{', '.join(index)}]"
    ctx.line(f"{target} = {_stored(ctx, op, target, value)}")
    ctx.em.depth -= len(dims)


# -- advanced indexing ---------------------------------------------------------------------------
def _advanced_plan(ctx, op, x: str, xvar, first_input: int, before_bounds=None):
    """Emit the preparation of an advanced index over `x`; `before_bounds(dims)` emits what
    is checked before the index arrays' bounds.

    Returns (dims, source): the indexed shape (expressions, in output order) and a function
    from the loop variables over that shape to the index expressions of `x`.
    """
    values = ctx.node.inputs[first_input:]
    k, axis = first_input, 0
    basic = []  # in output order: ("newaxis",) | ("slice", axis, first, step, length)
    arrays = []  # (array name, its ndim, the axis of x it indexes or None, is a scalar)
    adv_pos, first_out = [], None
    bound_checks = []  # (name of the flag that an index array is in bounds, axis)
    for pos, entry in enumerate(op.idx_list):
        if entry == "newaxis":
            basic.append(("newaxis",))
            continue
        if entry == "...":
            continue
        if entry == "int":
            adv_pos.append(pos)
            first_out = len(basic) if first_out is None else first_out
            arrays.append((_scalar_index(ctx, k, x, axis, op), 0, axis, True))
            k += 1
            axis += 1
            continue
        if entry == "array":
            adv_pos.append(pos)
            first_out = len(basic) if first_out is None else first_out
            var, name = values[k - first_input], ctx.inp(k)
            k += 1
            if var.dtype == "bool":
                for j in range(var.ndim):
                    ctx.fail_if(f"{name}.shape[{j}] != {x}.shape[{axis + j}]", "IndexError",
                                f"{op}: the boolean index does not match the indexed axes")
                if var.ndim == 0:  # x[True] adds an axis of length 1, x[False] of length 0
                    z = ctx.fresh("nz")
                    ctx.line(f"{z} = np.zeros(1 if {name}.item() else 0, np.int64)")
                    arrays.append((z, 1, None, False))
                    continue
                nz = ctx.fresh("nz")
                ctx.line(f"{nz} = np.nonzero({name})")
                for j in range(var.ndim):
                    arrays.append((f"{nz}[{j}]", 1, axis + j, False))
                axis += var.ndim
                continue
            norm, ok = ctx.fresh("ia"), ctx.fresh("ok")
            fn = ctx.helper("normalize_indices", _normalize_indices)
            ctx.line(f"{norm}, {ok} = {fn}({name}, {x}.shape[{axis}])")
            bound_checks.append((ok, axis))
            arrays.append((norm if var.ndim else f"{norm}.item()", var.ndim, axis,
                           var.ndim == 0))
            axis += 1
            continue
        # a slice
        comps, given = [], entry[1:]
        for j in range(3):
            if given[j]:
                c = ctx.fresh("sl")
                ctx.line(f"{c} = {_int_of(ctx, k)}")
                k += 1
                comps.append(c)
            else:
                comps.append(None)
        step = comps[2] or "1"
        if comps[2]:
            ctx.fail_if(f"{step} == 0", "ValueError", f"{op}: slice step cannot be zero")
        first, length = ctx.fresh("s0"), ctx.fresh("sn")
        fn = ctx.helper("slice_range", _slice_range)
        ctx.line(f"{first}, {length} = {fn}({x}.shape[{axis}], {comps[0] or 0}, "
                 f"{bool(comps[0])}, {comps[1] or 0}, {bool(comps[1])}, {step})")
        basic.append(("slice", axis, first, step, length))
        axis += 1
    for a in range(axis, xvar.ndim):
        basic.append(("slice", a, "0", "1", f"{x}.shape[{a}]"))
    # broadcast the index arrays into one block
    bnd = max(nd for _, nd, _, _ in arrays)
    bdim = ctx.helper("bdim", broadcast_length)
    block = []
    for d in range(bnd):
        cands = [f"{name}.shape[{d - (bnd - nd)}]" for name, nd, _, scalar in arrays
                 if not scalar and d - (bnd - nd) >= 0]
        b = ctx.fresh("bd")
        ctx.line(f"{b} = {cands[0]}")
        for c in cands[1:]:
            ctx.line(f"{b} = {bdim}({b}, {c})")
        if len(cands) > 1:
            ctx.fail_if(f"{b} < 0", "IndexError",
                        f"{op}: shape mismatch: index arrays cannot be broadcast together")
        block.append(b)
    btuple = "(" + "".join(f"{b}, " for b in block) + ")"
    reads = []  # (axis or None, name of the broadcast array or scalar)
    for name, nd, ax, scalar in arrays:
        if scalar:
            reads.append((ax, name, False))
        else:
            bname = ctx.fresh("ib")
            ctx.line(f"{bname} = np.broadcast_to({name}, {btuple})")
            reads.append((ax, bname, True))
    adjacent = adv_pos == list(range(adv_pos[0], adv_pos[0] + len(adv_pos)))
    at = first_out if adjacent else 0
    layout = basic[:at] + [("block", d) for d in range(bnd)] + basic[at:]
    dims = []
    for item in layout:
        if item[0] == "newaxis":
            dims.append("1")
        elif item[0] == "slice":
            dims.append(item[4])
        else:
            dims.append(block[item[1]])
    if before_bounds is not None:
        before_bounds(dims)
    # numpy checks index arrays only where their broadcast block is not empty
    for ok, axis in bound_checks:
        ctx.fail_if(all_of([f"not {ok}", f"{' * '.join(block)} != 0"]), "IndexError",
                    f"{op}: index out of bounds for axis {axis}")

    def source(loop_vars):
        bvars = [v for v, item in zip(loop_vars, layout) if item[0] == "block"]
        index = {}
        for v, item in zip(loop_vars, layout):
            if item[0] == "slice":
                _, a, first, step, _ = item
                index[a] = v if (first, step) == ("0", "1") else f"{first} + {v} * {step}"
        bidx = ", ".join(bvars) if bvars else "()"
        for ax, name, is_array in reads:
            if ax is not None:
                index[ax] = f"{name}[{bidx}]" if is_array else name
        return [index[a] for a in range(xvar.ndim)]

    return dims, source


def _loops(ctx, dims):
    loop = [ctx.fresh("i") for _ in dims]
    for v, d in zip(loop, dims):
        ctx.line(f"for {v} in range({d}):")
        ctx.em.depth += 1
    return loop


def _idx(parts) -> str:
    return "[" + ", ".join(parts) + "]" if parts else "[()]"


def _row_indexing(op, ctx, array: int, index: int) -> bool:
    """Whether the step indexes the rows of input `array` (C-contiguous, 2 dims or more) by
    one integer index array (input `index`) and nothing else: `table[ids]`, an embedding's
    lookup and its gradient's scatter, run row by row (each row one contiguous copy LLVM
    vectorizes; the general loops index every element, 5x numpy's time on a 1024-row
    gather)."""
    index = ctx.input_var(index)
    return (tuple(op.idx_list) == ("array",) and index.dtype != "bool" and index.ndim >= 1
            and ctx.input_var(array).ndim >= 2 and ctx.is_contiguous(array))


def _index_rows(ctx, op, x: str, index: str) -> tuple[str, str, str]:
    """(flat in-bounds indices, their count, x's row length) of the rows `index` picks from
    `x`, raising numpy's IndexError for an index out of bounds (unless it picks nothing)."""
    norm, ok = ctx.fresh("ia"), ctx.fresh("ok")
    ctx.line(f"{norm}, {ok} = {ctx.helper('normalize_indices', _normalize_indices)}({index}, "
             f"{x}.shape[0])")
    ctx.fail_if(all_of([f"not {ok}", f"{norm}.size != 0"]), "IndexError",
                f"{op}: index out of bounds for axis 0")
    ndim = ctx.input_var(0).ndim
    length = " * ".join(f"{x}.shape[{a}]" for a in range(1, ndim))
    flat = ctx.fresh("if")
    ctx.line(f"{flat} = {reshaped(ctx, norm, f'{norm}.size')}")
    return flat, f"{norm}.size", length


def _row_loop(ctx, count: str, length: str, rows, line_of) -> None:
    """For each of `count` rows r: the rows `rows` gives ([(2-d array, its row index)]) as
    vectors (c_row: the inner loop is a contiguous copy LLVM vectorizes, 30 us for 1024 rows
    of 256 floats where indexing the 2-d arrays took 136), then line_of(vectors, j) for each
    of their `length` elements j."""
    r, j = ctx.fresh("r"), ctx.fresh("j")
    row = ctx.helper("c_row", c_row)
    ctx.line(f"for {r} in range({count}):")
    with ctx.indent():
        vectors = []
        for array, at in rows(r):
            vectors.append(ctx.fresh("rv"))
            ctx.line(f"{vectors[-1]} = {row}({array}, {at})")
        ctx.line(f"for {j} in range({length}):")
        with ctx.indent():
            ctx.line(line_of(vectors, j))


@emit.register(AdvancedSubtensor)
def _emit_advanced_subtensor(op, ctx) -> None:
    x = ctx.inp(0)
    if _row_indexing(op, ctx, 0, 1):
        flat, count, length = _index_rows(ctx, op, x, ctx.inp(1))
        dims = [f"{ctx.inp(1)}.shape[{d}]" for d in range(ctx.input_var(1).ndim)] + [
            f"{x}.shape[{a}]" for a in range(1, ctx.input_var(0).ndim)]
        out = ctx.alloc(0, tuple_expr(dims))
        rows_x, rows_o = ctx.fresh("rx"), ctx.fresh("ro")
        ctx.line(f"{rows_x} = {reshaped(ctx, x, f'({x}.shape[0], {length})')}")
        ctx.line(f"{rows_o} = {reshaped(ctx, out, f'({count}, {length})')}")
        _row_loop(ctx, count, length, lambda r: [(rows_o, r), (rows_x, f"{flat}[{r}]")],
                  lambda v, j: f"{v[0]}[{j}] = {v[1]}[{j}]")
        return
    dims, source = _advanced_plan(ctx, op, x, ctx.input_var(0), 1)
    out = ctx.alloc(0, "(" + "".join(f"{d}, " for d in dims) + ")")
    loop = _loops(ctx, dims)
    ctx.line(f"{out}{_idx(loop)} = {x}{_idx(source(loop))}")
    ctx.em.depth -= len(dims)


@emit.register(AdvancedIncSubtensor)
def _emit_advanced_inc_subtensor(op, ctx) -> None:
    out = _copy_input(ctx)
    v = ctx.inp(1)
    vndim = ctx.input_var(1).ndim
    if (_row_indexing(op, ctx, 0, 2) and ctx.src.specialized and ctx.is_contiguous(1)
            and vndim == ctx.input_var(2).ndim + ctx.input_var(0).ndim - 1):
        # (the specialized program: a value broadcast at run time raises RuntimeBroadcast,
        # and the general program's loops take it)
        index = ctx.inp(2)
        dims = [f"{index}.shape[{d}]" for d in range(ctx.input_var(2).ndim)] + [
            f"{out}.shape[{a}]" for a in range(1, ctx.input_var(0).ndim)]
        ctx.check_equal([(f"{v}.shape[{d}]", e) for d, e in enumerate(dims)],
                        "RuntimeBroadcast", str(op))  # (before the bounds, as numpy's set)
        flat, count, length = _index_rows(ctx, op, out, index)
        v = _unshared_value(ctx, v, vndim)
        rows_o, rows_v = ctx.fresh("ro"), ctx.fresh("rv")
        ctx.line(f"{rows_o} = {reshaped(ctx, out, f'({out}.shape[0], {length})')}")
        ctx.line(f"{rows_v} = {reshaped(ctx, v, f'({count}, {length})')}")
        _row_loop(ctx, count, length, lambda r: [(rows_o, f"{flat}[{r}]"), (rows_v, r)],
                  lambda w, j: f"{w[0]}[{j}] = {_stored(ctx, op, f'{w[0]}[{j}]', f'{w[1]}[{j}]')}")
        return
    # numpy's setitem checks the value against the indexed shape before the index arrays'
    # bounds (seed 28282); its inc (x[i] += v) reads x[i] first
    def check(dims):
        _check_value(ctx, op, v, vndim, dims)

    dims, source = _advanced_plan(ctx, op, out, ctx.input_var(0), 2,
                                  check if op.set_instead_of_inc else None)
    if not op.set_instead_of_inc:
        check(dims)
    v = _unshared_value(ctx, v, vndim)
    vb = ctx.fresh("vb")
    if dims:
        ctx.line(f"{vb} = np.broadcast_to({v}, ({''.join(f'{d}, ' for d in dims)}))")
    else:
        ctx.line(f"{vb} = {v}")
    loop = _loops(ctx, dims)
    target = f"{out}{_idx(source(loop))}"
    ctx.line(f"{target} = {_stored(ctx, op, target, f'{vb}{_idx(loop)}')}")
    ctx.em.depth -= len(dims)
