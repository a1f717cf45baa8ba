"""CPU kernels of the shape ops (Reshape, Alloc, Join, ARange) and of MatMul (BLAS for 2-d
float products through numba's np.dot, plain loops for integers and bools)."""

from __future__ import annotations

import numba
import numpy as np

from verglas.cpu_backend.codegen import np_dtype
from verglas.cpu_backend.kernels import broadcast_dim, emit, register_helper
from verglas.ops.linalg import MatMul
from verglas.ops.shape import Alloc, ARange, Join, Reshape

__all__ = []


def _tuple(items) -> str:
    return "(" + "".join(f"{d}, " for d in items) + ")"


@emit.register(Reshape)
def _emit_reshape(op, ctx) -> None:
    x, shp = ctx.inp(0), ctx.inp(1)
    dims = [ctx.fresh("d") for _ in range(op.ndim)]
    known, neg = ctx.fresh("known"), ctx.fresh("neg")
    ctx.line(f"{known} = 1")
    ctx.line(f"{neg} = 0")
    for k, d in enumerate(dims):
        ctx.line(f"{d} = np.int64({shp}[{k}])")
        ctx.line(f"if {d} == -1:")
        with ctx.indent():
            ctx.line(f"{neg} += 1")
        ctx.line(f"elif {d} < 0:")
        with ctx.indent():
            ctx.raise_("ValueError", f"{op}: negative dimension in the new shape")
        ctx.line("else:")
        with ctx.indent():
            ctx.line(f"{known} *= {d}")
    ctx.line(f"if {neg} > 1:")
    with ctx.indent():
        ctx.raise_("ValueError", f"{op}: more than one -1 in the new shape")
    ctx.line(f"if {neg} == 1:")
    with ctx.indent():
        ctx.line(f"if {known} == 0 or {x}.size % {known} != 0:")
        with ctx.indent():
            ctx.raise_("ValueError", f"{op}: cannot reshape the array into the new shape")
        for d in dims:
            ctx.line(f"if {d} == -1:")
            with ctx.indent():
                ctx.line(f"{d} = {x}.size // {known}")
    ctx.line(f"elif {known} != {x}.size:")
    with ctx.indent():
        ctx.raise_("ValueError", f"{op}: cannot reshape the array into the new shape (sizes "
                                 f"differ)")
    # numba reshapes C-contiguous arrays only: a strided input is copied first
    src = x if ctx.is_contiguous(0) else f"np.ascontiguousarray({x})"
    ctx.line(f"{ctx.out(0)} = {src}.reshape({_tuple(dims)})")
    ctx.set_contiguous(0, True)


@emit.register(Alloc)
def _emit_alloc(op, ctx) -> None:
    value = ctx.inp(0)
    vvar = ctx.input_var(0)
    n = len(ctx.node.inputs) - 1
    dims = []
    for k in range(n):
        d = ctx.fresh("d")
        ctx.line(f"{d} = np.int64({ctx.inp(k + 1)}.item())")
        ctx.line(f"if {d} < 0:")
        with ctx.indent():
            ctx.raise_("ValueError", f"{op}: negative dimension")
        dims.append(d)
    lead = n - vvar.ndim
    for j in range(vvar.ndim):
        if vvar.type.shape[j] == 1:
            continue
        ctx.line(f"if {value}.shape[{j}] != 1 and {value}.shape[{j}] != {dims[lead + j]}:")
        with ctx.indent():
            ctx.raise_("ValueError", f"{op}: cannot broadcast the value to the target shape")
    out = ctx.alloc(0, _tuple(dims))
    if all(s == 1 for s in vvar.type.shape):  # one value fills everything
        v, flat, k = ctx.fresh("t"), ctx.fresh("of"), ctx.fresh("k")
        ctx.line(f"{v} = {value}.item()")
        ctx.line(f"{flat} = {out}.reshape({out}.size)")
        ctx.line(f"for {k} in range({out}.size):")
        with ctx.indent():
            ctx.line(f"{flat}[{k}] = {v}")
    else:
        ctx.line(f"{out}[...] = {value}")


@emit.register(Join)
def _emit_join(op, ctx) -> None:
    node = ctx.node
    ndim = node.outputs[0].ndim
    a = op.axis
    xs = [ctx.inp(i) for i in range(len(node.inputs))]
    for x in xs[1:]:
        for d in range(ndim):
            if d == a:
                continue
            ctx.line(f"if {x}.shape[{d}] != {xs[0]}.shape[{d}]:")
            with ctx.indent():
                ctx.raise_("ValueError", f"{op}: the input shapes differ along axis {d}")
    total = " + ".join(f"{x}.shape[{a}]" for x in xs)
    dims = [total if d == a else f"{xs[0]}.shape[{d}]" for d in range(ndim)]
    out = ctx.alloc(0, _tuple(dims))
    off = ctx.fresh("off")
    ctx.line(f"{off} = 0")
    for x in xs:
        index = ", ".join([":"] * a + [f"{off}:{off} + {x}.shape[{a}]"])
        ctx.line(f"{out}[{index}] = {x}")
        ctx.line(f"{off} += {x}.shape[{a}]")


@emit.register(ARange)
def _emit_arange(op, ctx) -> None:
    start, stop, step = (ctx.fresh(p) for p in ("start", "stop", "step"))
    for name, i in zip((start, stop, step), range(3)):
        ctx.line(f"{name} = {ctx.inp(i)}.item()")
    ctx.line(f"if {step} == 0:")
    with ctx.indent():
        ctx.raise_("ValueError", f"{op}: step is zero")
    n = ctx.fresh("n")
    ctx.line(f"{n} = np.int64(math.ceil((np.float64({stop}) - np.float64({start})) / "
             f"np.float64({step})))")
    ctx.line(f"if {n} < 0:")
    with ctx.indent():
        ctx.line(f"{n} = 0")
    out = ctx.alloc(0, f"({n},)")
    k = ctx.fresh("k")
    dt = np_dtype(op.dtype)
    if np.dtype(op.dtype).kind == "f":
        # numpy: the first two values in the dtype, then start + i * (second - first)
        s0, delta = ctx.fresh("s"), ctx.fresh("delta")
        ctx.line(f"{s0} = {dt}({start})")
        ctx.line(f"{delta} = np.float64({dt}({start} + {step})) - np.float64({s0})")
        ctx.line(f"for {k} in range({n}):")
        with ctx.indent():
            ctx.line(f"{out}[{k}] = {dt}(np.float64({s0}) + {k} * {delta})")
    else:
        ctx.line(f"for {k} in range({n}):")
        with ctx.indent():
            ctx.line(f"{out}[{k}] = {dt}({start} + {k} * {step})")


# -- MatMul -------------------------------------------------------------------------------------
@register_helper
@numba.njit(cache=False)
def _matmul_blas(a, b, out):
    """out = a @ b for 2-d float arrays of one dtype (BLAS gemm via np.dot)."""
    if a.shape[1] == 0:
        out[...] = 0
        return
    np.dot(np.ascontiguousarray(a), np.ascontiguousarray(b), out)


@register_helper
@numba.njit(cache=False)
def _matmul_blas_direct(a, b, out):
    """out = a @ b for 2-d float arrays typed C- or F-contiguous: no copies."""
    if a.shape[1] == 0:
        out[...] = 0
        return
    np.dot(a, b, out)


@register_helper
@numba.njit(cache=False)
def _matmul_loops(a, b, out):
    """out = a @ b for 2-d arrays of any dtype (integers wrap, bools: any(a and b))."""
    m, k = a.shape
    n = b.shape[1]
    out[...] = 0
    for i in range(m):
        for p in range(k):
            aip = a[i, p]
            for j in range(n):
                out[i, j] += aip * b[p, j]


@emit.register(MatMul)
def _emit_matmul(op, ctx) -> None:
    a, b = ctx.inp(0), ctx.inp(1)
    va, vb = ctx.input_var(0), ctx.input_var(1)
    out_dtype = ctx.node.outputs[0].dtype
    nd = ctx.node.outputs[0].ndim
    nbatch = nd - 2
    ctx.line(f"if {a}.shape[{va.ndim - 1}] != {b}.shape[{vb.ndim - 2}]:")
    with ctx.indent():
        ctx.raise_("ValueError", f"{op}: shapes not aligned (contracted dimensions differ)")
    dims, ia, ib = [], [], []  # per batch dim: its length, a's and b's index expressions
    loop = [ctx.fresh("i") for _ in range(nbatch)]
    for j in range(nbatch):
        cands = []
        for name, var, idx in ((a, va, ia), (b, vb, ib)):
            axis = j - (nbatch - (var.ndim - 2))
            if axis < 0:
                continue
            if var.type.shape[axis] == 1:
                idx.append("0")
                continue
            step = ctx.fresh("sa")
            ctx.line(f"{step} = 1 if {name}.shape[{axis}] != 1 else 0")
            idx.append(f"{loop[j]} * {step}")
            cands.append(f"{name}.shape[{axis}]")
        dims.append(broadcast_dim(ctx, cands, f"{op}: batch dimensions cannot be broadcast"))
    dims += [f"{a}.shape[{va.ndim - 2}]", f"{b}.shape[{vb.ndim - 1}]"]
    out = ctx.alloc(0, _tuple(dims))
    blas = out_dtype in ("float32", "float64")
    if blas:  # one dtype for gemm: convert the other operand once
        for var, name in ((va, a), (vb, b)):
            if var.dtype != out_dtype:
                conv = ctx.fresh("cv")
                ctx.line(f"{conv} = {name}.astype({np_dtype(out_dtype)})")
                if name == a:
                    a = conv
                else:
                    b = conv
    direct = (blas and nbatch == 0 and a == ctx.inp(0) and b == ctx.inp(1)
              and ctx.layout(0) in "CF" and ctx.layout(1) in "CF")
    fn = ctx.helper("matmul", _matmul_blas_direct if direct else
                    _matmul_blas if blas else _matmul_loops)
    for j in range(nbatch):
        ctx.line(f"for {loop[j]} in range({dims[j]}):")
        ctx.em.depth += 1
    # leading integer indices keep numba's C layout (np.dot's `out` must be contiguous)
    sa = f"{a}[{', '.join(ia)}]" if ia else a
    sb = f"{b}[{', '.join(ib)}]" if ib else b
    so = f"{out}[{', '.join(loop)}]" if loop else out
    ctx.line(f"{fn}({sa}, {sb}, {so})")
    ctx.em.depth -= nbatch


_ = np
