"""CPU kernels of the shape ops (Reshape, Alloc, Join, ARange) and of MatMul (BLAS gemm called
inline for float products, plain loops for integers and bools)."""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic
from numba.np.arrayobj import make_array
from numba.np.linalg import check_blas_return, ensure_blas, get_blas_kind, make_constant_slot

from verglas.cpu_backend.blas import COL_MAJOR, NO_TRANS, TRANS, numpy_cblas_gemm
from verglas.cpu_backend.dtypes import cast_expr, np_dtype, storage_dtype
from verglas.cpu_backend.intrinsics import reshaped
from verglas.cpu_backend.kernels import HELPER_REFS, broadcast_dim, emit, register_helper
from verglas.graph.basic import Constant
from verglas.ops.basic import Join, MakeVector
from verglas.ops.linalg import MatMul
from verglas.ops.shape import ARange, Alloc, Reshape
from verglas.rewrite.lengths import lower_bound
from verglas.source import tuple_expr

__all__ = []




def _lengths_proven(var) -> bool:
    """Whether every entry of the shape vector `var` is provably a length (>= 0, never -1):
    a constant, or a make_vector of shape reads and their products (a gradient's reshapes)."""
    if isinstance(var, Constant):
        return bool((np.asarray(var.data) >= 0).all())
    if var.owner is None or not isinstance(var.owner.op, MakeVector):
        return False
    bounds = [lower_bound(e) for e in var.owner.inputs]
    return all(b is not None and b >= 0 for b in bounds)


@emit.register(Reshape)
def _emit_reshape(op, ctx) -> None:
    x = ctx.inp(0)
    target = ctx.elements(1) or [f"{ctx.inp(1)}[{k}]" for k in range(op.ndim)]
    dims = [ctx.fresh("d") for _ in range(op.ndim)]
    for k, d in enumerate(dims):
        ctx.line(f"{d} = np.int64({target[k]})")
    if _lengths_proven(ctx.input_var(1)):  # no -1 to resolve: the sizes must agree
        ctx.line(f"if {' * '.join(dims) or '1'} != {x}.size:")
        with ctx.indent():
            ctx.raise_("ValueError", f"{op}: cannot reshape the array into the new shape "
                                     f"(sizes differ)")
    else:
        _resolve_minus_one(op, ctx, x, dims)
    # numba reshapes C-contiguous arrays only: a strided input is copied first
    src = x if ctx.is_contiguous(0) else f"np.ascontiguousarray({x})"
    ctx.line(f"{ctx.out(0)} = {reshaped(ctx, src, tuple_expr(dims))}")
    ctx.set_contiguous(0, True)


def _resolve_minus_one(op, ctx, x: str, dims: list[str]) -> None:
    """Emit numpy's checks of a reshape's target `dims` (at most one -1, no other negative
    length, the sizes agree) and replace a -1 by the length it stands for."""
    known, neg = ctx.fresh("known"), ctx.fresh("neg")
    ctx.line(f"{known} = 1")
    ctx.line(f"{neg} = 0")
    for d in dims:
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
    out = ctx.alloc(0, tuple_expr(dims))
    if all(s == 1 for s in vvar.type.shape):  # one value fills everything
        v, flat, k = ctx.fresh("t"), ctx.fresh("of"), ctx.fresh("k")
        ctx.line(f"{v} = {value}.item()")
        ctx.line(f"{flat} = {reshaped(ctx, out, f'{out}.size')}")
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
    out = ctx.alloc(0, tuple_expr(dims))
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
    def conv(expr):
        return cast_expr(expr, op.dtype, ctx.src)

    if np.dtype(op.dtype).kind == "f":
        # numpy: the first two values in the dtype, then start + i * (second - first)
        s0, delta = ctx.fresh("s"), ctx.fresh("delta")
        ctx.line(f"{s0} = {conv(start)}")
        ctx.line(f"{delta} = np.float64({conv(f'{start} + {step}')}) - np.float64({s0})")
        ctx.line(f"for {k} in range({n}):")
        with ctx.indent():
            ctx.line(f"{out}[{k}] = {conv(f'np.float64({s0}) + {k} * {delta}')}")
    else:
        ctx.line(f"for {k} in range({n}):")
        with ctx.indent():
            ctx.line(f"{out}[{k}] = {conv(f'{start} + {k} * {step}')}")


# -- MatMul -------------------------------------------------------------------------------------
# Float products call BLAS gemm (numba's `numba_xxgemm` wrapper of scipy's cython_blas) from
# code inlined into the program by the intrinsic `_gemm`: no jitted function is compiled per
# operand layout (numba's np.dot compiles one per (dtype, layout, layout), ~0.2 s each). The
# operands' strides decide at run time whether gemm can read them as they are.
_ll_char = ir.IntType(8)
_ll_intp = ir.IntType(types.intp.bitwidth)
_ll_void_p = ir.IntType(8).as_pointer()
_GEMM_FNTY = ir.FunctionType(ir.IntType(32), [
    _ll_char, _ll_char, _ll_char,  # kind, transa, transb
    _ll_intp, _ll_intp, _ll_intp,  # m, n, k
    _ll_void_p, _ll_void_p, _ll_intp,  # alpha, a, lda
    _ll_void_p, _ll_intp, _ll_void_p,  # b, ldb, beta
    _ll_void_p, _ll_intp])  # c, ldc


def _gemm_operand(builder, r, c, s0, s1, isz):
    """(trans flag, leading dimension, usable) of an r x c operand with byte strides s0, s1
    for a column-major gemm reading its transpose: row-major ('n', ld = row stride) when the
    last axis has unit stride, else column-major ('t', ld = column stride) when the first has;
    the leading dimension must be >= max(1, ncols) (row-major) or max(1, nrows). A length-1
    axis has an arbitrary stride: it counts as unit, and the ld is then the minimum valid."""
    ty = r.type
    one, size = ir.Constant(ty, 1), ir.Constant(ty, isz)
    zero = ir.Constant(ty, 0)
    r_le1 = builder.icmp_signed("<=", r, one)
    c_le1 = builder.icmp_signed("<=", c, one)
    max_r = builder.select(r_le1, one, r)
    max_c = builder.select(c_le1, one, c)

    def fits(s, minimum):  # byte stride s is a whole number of elements >= minimum
        exact = builder.icmp_signed("==", builder.srem(s, size), zero)
        q = builder.sdiv(s, size)
        return q, builder.and_(exact, builder.icmp_signed(">=", q, minimum))

    q0, fit0 = fits(s0, max_c)
    q1, fit1 = fits(s1, max_r)
    row_ok = builder.and_(builder.or_(c_le1, builder.icmp_signed("==", s1, size)),
                          builder.or_(r_le1, fit0))
    col_ok = builder.and_(builder.or_(r_le1, builder.icmp_signed("==", s0, size)),
                          builder.or_(c_le1, fit1))
    trans = builder.select(row_ok, ir.Constant(_ll_char, ord("n")),
                           ir.Constant(_ll_char, ord("t")))
    ld = builder.select(row_ok, builder.select(r_le1, max_c, q0),
                        builder.select(c_le1, max_r, q1))
    return trans, ld, builder.or_(row_ok, col_ok)


def _gemm_function(context, module, dtype):
    """The LLVM function of `module` computing a float product from raw pointers, shapes and
    byte strides, built once per module (per program) and called by every `_gemm` call site
    (inlined into each site, the same code cost ~12 ms more compile time per site):

        status = gemm(a_data, m, k, a_stride0, a_stride1, b_data, n, b_stride0, b_stride1,
                      c_data)
    """
    kind = get_blas_kind(dtype)
    name = f"verglas_gemm_{kind}"
    fn = module.globals.get(name)
    if fn is not None:
        return fn
    intp = context.get_value_type(types.intp)
    fn = ir.Function(module, ir.FunctionType(intp, [
        _ll_void_p, intp, intp, intp, intp, _ll_void_p, intp, intp, intp, _ll_void_p]), name)
    fn.linkage = "internal"
    fn.attributes.add("noinline")
    a_data, m, k, as0, as1, b_data, n, bs0, bs1, c_data = fn.args
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    isz = context.get_abi_sizeof(context.get_data_type(dtype))
    zero = ir.Constant(intp, 0)
    status = cgutils.alloca_once_value(builder, zero)
    nonempty = builder.and_(builder.icmp_signed("!=", m, zero), builder.icmp_signed("!=", n, zero))
    with builder.if_then(nonempty):
        with builder.if_else(builder.icmp_signed("==", k, zero)) as (no_k, has_k):
            with no_k:
                cgutils.memset(builder, c_data,
                               builder.mul(builder.mul(m, n), ir.Constant(intp, isz)), 0)
            with has_k:
                # row-major C = A B is column-major C^T = B^T A^T: B is gemm's first operand
                ta, lda, ok_a = _gemm_operand(builder, m, k, as0, as1, isz)
                tb, ldb, ok_b = _gemm_operand(builder, k, n, bs0, bs1, isz)
                bad = builder.or_(builder.zext(builder.not_(ok_a), intp),
                                  builder.shl(builder.zext(builder.not_(ok_b), intp),
                                              ir.Constant(intp, 1)))
                builder.store(bad, status)
                with builder.if_then(builder.icmp_signed("==", bad, zero)):
                    cblas = numpy_cblas_gemm().get(kind)
                    if cblas is not None:  # numpy's own BLAS (see blas.py)
                        _call_cblas(context, builder, module, cblas, dtype, tb, ta, n, m, k,
                                    b_data, ldb, a_data, lda, c_data, n)
                    else:
                        xxgemm = cgutils.get_or_insert_function(module, _GEMM_FNTY,
                                                                "numba_xxgemm")
                        alpha = make_constant_slot(context, builder, dtype, 1.0)
                        beta = make_constant_slot(context, builder, dtype, 0.0)
                        res = builder.call(xxgemm, (
                            ir.Constant(_ll_char, ord(kind)), tb, ta, n, m, k,
                            builder.bitcast(alpha, _ll_void_p), b_data, ldb, a_data, lda,
                            builder.bitcast(beta, _ll_void_p), c_data, n))
                        check_blas_return(context, builder, res)
    builder.ret(builder.load(status))
    return fn


def _call_cblas(context, builder, module, symbol, dtype, transa, transb, m, n, k, a, lda, b,
                ldb, c, ldc) -> None:
    """numba_xxgemm's column-major product (transa/transb as 'n'/'t') through the CBLAS
    gemm `symbol` (see blas.py)."""
    i32 = ir.IntType(32)
    intp = m.type
    real = context.get_value_type(dtype)
    fnty = ir.FunctionType(ir.VoidType(), [i32, i32, i32, intp, intp, intp, real, _ll_void_p,
                                           intp, _ll_void_p, intp, real, _ll_void_p, intp])
    gemm = cgutils.get_or_insert_function(module, fnty, symbol)

    def trans(t):
        return builder.select(builder.icmp_unsigned("==", t, ir.Constant(_ll_char, ord("n"))),
                              i32(NO_TRANS), i32(TRANS))

    builder.call(gemm, (i32(COL_MAJOR), trans(transa), trans(transb), m, n, k, real(1.0), a,
                        lda, b, ldb, real(0.0), c, ldc))


@intrinsic
def _gemm(typingctx, a, b, out):
    """out = a @ b for 2-d arrays of one float dtype, `out` C-contiguous (shapes checked by
    the caller). Returns 0, or (when nothing was written) bit 0/1 set when `a`/`b` has strides
    gemm cannot take (negative, or no unit-stride axis): the caller copies it and calls again.
    k == 0 writes zeros; m == 0 or n == 0 does nothing."""
    arrays = (a, b, out)
    if not (all(isinstance(t, types.Array) and t.ndim == 2 for t in arrays)
            and a.dtype == b.dtype == out.dtype and a.dtype in (types.float32, types.float64)
            and out.layout == "C" and out.mutable):
        return None
    ensure_blas()

    def codegen(context, builder, sig, args):
        fn = _gemm_function(context, builder.module, a.dtype)
        A, B, C = (make_array(t)(context, builder, v) for t, v in zip(sig.args, args))
        m, k = cgutils.unpack_tuple(builder, A.shape, 2)
        n = cgutils.unpack_tuple(builder, B.shape, 2)[1]
        return builder.call(fn, (
            builder.bitcast(A.data, _ll_void_p), m, k, *cgutils.unpack_tuple(builder, A.strides, 2),
            builder.bitcast(B.data, _ll_void_p), n, *cgutils.unpack_tuple(builder, B.strides, 2),
            builder.bitcast(C.data, _ll_void_p)))

    return types.intp(a, b, out), codegen


HELPER_REFS["_gemm"] = _gemm  # generated code names it; cached programs find it again
numpy_cblas_gemm()  # its symbols must be known before a cached program's code loads


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
    layouts = [ctx.layout(0), ctx.layout(1)]  # numba's layouts of the 2-d operands
    out_dtype = ctx.node.outputs[0].dtype
    nd = ctx.node.outputs[0].ndim
    nbatch = nd - 2
    ctx.check_equal([(f"{a}.shape[{va.ndim - 1}]", f"{b}.shape[{vb.ndim - 2}]")], "ValueError",
                    f"{op}: shapes not aligned (contracted dimensions differ)")
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
    out = ctx.alloc(0, tuple_expr(dims))
    blas = storage_dtype(out_dtype) in ("float32", "float64")  # (float16: in float32)
    if blas:  # one dtype for gemm: convert the other operand once
        for i, (var, name) in enumerate(((va, a), (vb, b))):
            if var.dtype != out_dtype:
                conv = ctx.fresh("cv")
                ctx.line(f"{conv} = {name}.astype({np_dtype(out_dtype)})")
                layouts[i] = "C"
                if i == 0:
                    a = conv
                else:
                    b = conv
    # leading integer indices keep numba's C layout (gemm's `out` must be C-contiguous);
    # an F or A array indexed so is A
    for i, idx in enumerate((ia, ib)):
        if idx and layouts[i] != "C":
            layouts[i] = "A"
    fn = ctx.helper("matmul", _gemm if blas else _matmul_loops)
    if blas and nbatch and vb.ndim == 2 and layouts[0] == "C":
        # (..., M, K) @ (K, N) with a C-contiguous `a`: one gemm over all its rows, as numpy
        rows = " * ".join(f"{a}.shape[{k}]" for k in range(va.ndim - 1))
        flat_a = reshaped(ctx, a, f"({rows}, {a}.shape[{va.ndim - 1}])")
        flat_out = reshaped(ctx, out, f"({rows}, {dims[-1]})")
        right = b if layouts[1] != "A" else f"np.ascontiguousarray({b})"
        ctx.line(f"{fn}({flat_a}, {right}, {flat_out})")
        _round_half(ctx, out, out_dtype)
        return
    for j in range(nbatch):
        ctx.line(f"for {loop[j]} in range({dims[j]}):")
        ctx.em.depth += 1
    sa = f"{a}[{', '.join(ia)}]" if ia else a
    sb = f"{b}[{', '.join(ib)}]" if ib else b
    # a matrix of a batched transpose of a C array is the transpose (F) of the array's own:
    # gemm takes it as it is (typed 'A', it was a call that could fail and copy, and the
    # copy's code took ~0.3 s to compile)
    for i, idx in enumerate((ia, ib)):
        base = ctx.swapped_base(i) if layouts[i] == "A" and len(idx) == nbatch and idx \
            and (va, vb)[i].ndim == nd else None
        if base is not None:
            view = f"{base}[{', '.join(idx)}].T"
            sa, sb = (view, sb) if i == 0 else (sa, view)
            layouts[i] = "F"
    so = f"{out}[{', '.join(loop)}]" if loop else out
    if blas and "A" in layouts:
        # a C or F array always suits gemm; an A one may not: copied when gemm says so
        fixed = [f"np.ascontiguousarray({x})" if lay == "A" else x
                 for x, lay in zip((sa, sb), layouts)]
        bad = ctx.fresh("bad")
        ctx.line(f"{bad} = {fn}({sa}, {sb}, {so})")
        ctx.line(f"if {bad} != 0:")
        with ctx.indent():
            ctx.line(f"{fn}({fixed[0]}, {fixed[1]}, {so})")
    else:
        ctx.line(f"{fn}({sa}, {sb}, {so})")
    ctx.em.depth -= nbatch
    _round_half(ctx, out, out_dtype)


def _round_half(ctx, out: str, out_dtype: str) -> None:
    if out_dtype == "float16":  # computed in float32: rounded to half precision
        flat, k = ctx.fresh("of"), ctx.fresh("k")
        ctx.line(f"{flat} = {reshaped(ctx, out, f'{out}.size')}")
        ctx.line(f"for {k} in range({out}.size):")
        with ctx.indent():
            ctx.line(f"{flat}[{k}] = {cast_expr(f'{flat}[{k}]', out_dtype, ctx.src)}")


_ = np
