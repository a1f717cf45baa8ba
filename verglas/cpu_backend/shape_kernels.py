"""CPU kernels of the shape ops: views (DimShuffle), shapes and their elements (Shape, ShapeI,
MakeVector), and SumToShape, the gradient's sum over broadcast axes."""

from __future__ import annotations

import numba

from verglas.cpu_backend.broadcast_copy import broadcast_offset
from verglas.cpu_backend.intrinsics import c_contiguous, empty_expr, permuted, reshaped, zero_d
from verglas.cpu_backend.kernels import emit, literal, register_helper
from verglas.ops.basic import DimShuffle, MakeVector, Shape, ShapeI
from verglas.ops.elemwise import SumToShape
from verglas.ops.shape import Reshape
from verglas.source import tuple_expr


def _unproven_ones(ctx, axes) -> list[int]:
    """The axes of input 0 among `axes` whose length 1 its type does not promise."""
    static = ctx.input_var(0).type.shape
    return [d for d in axes if static[d] != 1]


@emit.register(DimShuffle)
def _emit_dimshuffle(op, ctx) -> None:
    scalar = ctx.scalar(0)
    if scalar is not None and not op.dropped and ctx.input_var(0).ndim == 0:
        ctx.set_scalar(0, scalar)  # a broadcast view of one element: emitted only if needed
        return
    x, out = ctx.inp(0), ctx.out(0)
    kept_sorted = sorted(op.kept)
    ctx.check_equal([(f"{x}.shape[{d}]", "1") for d in _unproven_ones(ctx, op.dropped)],
                    "ValueError", f"{op}: cannot drop an axis whose length is not 1")
    dims = ["1" if d == "x" else f"{x}.shape[{d}]" for d in op.new_order]
    ctx.shape_is(0, dims)
    if list(op.kept) == kept_sorted and ctx.is_contiguous(0):
        # no transpose: a reshape keeps the buffer C-contiguous (and numba's type 'C')
        ctx.line(f"{out} = {reshaped(ctx, x, tuple_expr(dims))}")
        ctx.set_contiguous(0)
        return
    # drop length-1 axes by indexing with 0, transpose the rest, insert new axes with None
    if op.dropped:
        index = ", ".join("0" if d in op.dropped else ":" for d in range(op.input_ndim))
        cur = ctx.fresh("v")
        # every axis dropped: indexing gives the element itself, a 0-d array holds it
        ctx.line(f"{cur} = {x}[{index}]" if op.kept else f"{cur} = {zero_d(f'{x}[{index}]')}")
    else:
        cur = x
    perm = tuple(kept_sorted.index(d) for d in op.kept)
    permute = ctx.helper("permuted", permuted)
    axes = ",".join(map(str, perm))
    if (not op.dropped and not op.inserted and ctx.is_contiguous(0)
            and perm == tuple(reversed(range(len(perm))))):
        ctx.line(f'{out} = {permute}({x}, "{axes}")')  # F-contiguous: BLAS takes it as it is
        ctx.set_layout(0, "F")
        return
    n = len(perm)
    if (not op.dropped and not op.inserted and ctx.is_contiguous(0) and n >= 3
            and perm == (*range(n - 2), n - 1, n - 2)):
        ctx.set_last_axes_swapped(0, 0)  # (a batched matmul takes each matrix as it is)
    if perm != tuple(range(len(perm))):
        nxt = ctx.fresh("v")
        ctx.line(f'{nxt} = {permute}({cur}, "{axes}")')
        cur = nxt
    if op.inserted:
        index = ", ".join("None" if d == "x" else ":" for d in op.new_order)
        ctx.line(f"{out} = {cur}[{index}]")
    else:
        ctx.line(f"{out} = {cur}")


@emit.register(Shape)
def _emit_shape(op, ctx) -> None:
    x = ctx.inp(0)
    ndim = ctx.input_var(0).ndim
    items = "".join(f"{x}.shape[{a}], " for a in range(ndim))
    ctx.line(f"{ctx.out(0)} = np.array(({items}), dtype=np.int64)" if ndim
             else f"{ctx.out(0)} = np.empty(0, dtype=np.int64)")


@emit.register(ShapeI)
def _emit_shape_i(op, ctx) -> None:
    # a scalar: read where it is used (a MakeVector entry, a loop bound), a 0-d array only if
    # something needs the array itself
    ctx.set_scalar(0, f"{ctx.inp(0)}.shape[{op.i}]")


@emit.register(MakeVector)
def _emit_make_vector(op, ctx) -> None:
    elements = []
    for i in range(len(ctx.node.inputs)):
        data = ctx.constant_value(i)
        elements.append(literal(data.reshape(()), op.dtype, ctx) if data is not None
                        else ctx.scalar(i) or ctx.inp(i) + ".item()")
    if ctx.step.outputs[0] not in ctx.program.outputs and all(
            isinstance(st.node.op, (SumToShape, Reshape)) and k == 1
            for st, k in ctx.readers(0)):
        # a target shape: its readers take the elements (no array to build and index: each
        # statement costs numba compile time); in a general program it is built at its use
        ctx.set_elements(0, op.dtype, elements)
        return
    # element by element: numba's np.array rejects tuples of mixed scalar types
    out = ctx.out(0)
    ctx.line(f"{out} = {empty_expr(ctx.src, f'({len(elements)},)', op.dtype)}")
    for i, value in enumerate(elements):
        ctx.line(f"{out}[{i}] = {value}")


@register_helper
@numba.njit(cache=False)
def _sum_to_shape(g, target, out):
    # out has g's rank; each g element adds into the element whose broadcast axes are 0
    same = True
    for a in range(g.ndim):
        if target[a] != g.shape[a]:
            same = False
            if target[a] != 1:
                raise ValueError("SumToShape: cannot reduce to the requested shape")
    gv = c_contiguous(g).reshape(g.size)
    ov = out.reshape(out.size)
    n = g.size
    if same:  # nothing was broadcast (the usual case): a vectorized copy
        for flat in range(n):
            ov[flat] = gv[flat]
        return
    out[...] = 0
    for flat in range(n):
        ov[broadcast_offset(flat, g.shape, target)] += gv[flat]


@register_helper
@numba.njit(cache=False, no_cpython_wrapper=True, no_cfunc_wrapper=True)
def copy_into(g, out):
    """out[:] = g for 1-d C-contiguous arrays of one length (the call site flattens them)."""
    for k in range(out.shape[0]):
        out[k] = g[k]


@emit.register(SumToShape)
def _emit_sum_to_shape(op, ctx) -> None:
    # one helper call, also for the usual equal-shape copy: an inline loop per call site cost
    # ~60 ms of numba compile each (mlp_grad has six), the helper is compiled once
    g = ctx.inp(0)
    ndim = ctx.input_var(0).ndim
    if ctx.src.specialized and ndim:  # nothing broadcast: the target is g's own shape
        target = ctx.elements(1) or [f"{ctx.inp(1)}[{a}]" for a in range(ndim)]
        ctx.check_equal([(t, f"{g}.shape[{a}]") for a, t in enumerate(target)],
                        "RuntimeBroadcast", str(op))
        # g dies here: the result is g itself (the scheduler's decision, variants.py)
        if ctx.step.index in ctx.program.adopted and ctx.adopt(0, 0) is not None:
            return
        shape = "(" + "".join(f"{g}.shape[{a}], " for a in range(ndim)) + ")"
        out = ctx.alloc(0, shape)
        src = g if ctx.is_contiguous(0) else ctx.contiguous(g)
        ctx.line(f"{ctx.helper('copy_into', copy_into)}({reshaped(ctx, src, f'{src}.size')}, "
                 f"{reshaped(ctx, out, f'{out}.size')})")
        return
    shp = ctx.inp(1)
    out = ctx.alloc(0, "(" + "".join(f"{shp}[{a}], " for a in range(ndim)) + ")")
    ctx.line(f"{ctx.helper('sum_to_shape', _sum_to_shape)}({g}, {shp}, {out})")

