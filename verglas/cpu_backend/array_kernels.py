"""CPU kernels of the shape ops (Reshape, Alloc, Join, ARange) and of MatMul (BLAS gemm called
inline for float products, plain loops for integers and bools)."""

from __future__ import annotations

import itertools

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic
from numba.np.arrayobj import make_array
from numba.np.linalg import check_blas_return, ensure_blas, get_blas_kind, make_constant_slot

from verglas.cpu_backend.blas import (COL_MAJOR, NO_TRANS, ROW_MAJOR, TRANS, UPPER,
                                      numpy_cblas_gemm, numpy_cblas_gemv, numpy_cblas_syrk)
from verglas.cpu_backend.dtypes import cast_expr, np_dtype, storage_dtype
from verglas.cpu_backend.intrinsics import (c_contiguous, prefer_wide_vectors, reshape_lengths,
                                            reshaped)
from verglas.cpu_backend.kernels import HELPER_REFS, broadcast_dim, emit, register_helper
from verglas.graph.basic import Constant
from verglas.ops.basic import Join, MakeVector
from verglas.ops.linalg import MatMul
from verglas.ops.shape import ARange, Alloc, Reshape
from verglas.rewrite.lengths import lower_bound
from verglas.source import all_of, tuple_expr

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
        ctx.fail_if(f"{' * '.join(dims) or '1'} != {x}.size", "ValueError",
                    f"{op}: cannot reshape the array into the new shape (sizes differ)")
    else:  # (one call: numpy's checks and the -1 resolved, see reshape_lengths)
        resolved = [ctx.fresh("d") for _ in dims]
        fn = ctx.helper("reshape_lengths", reshape_lengths)
        ctx.line(f"{''.join(f'{r}, ' for r in resolved)}= {fn}({x}.size, {tuple_expr(dims)}, "
                 f"{str(op)!r})")
        dims = resolved
    # numba reshapes C-contiguous arrays only: a strided input is copied first
    src = x if ctx.is_contiguous(0) else ctx.contiguous(x)
    ctx.line(f"{ctx.out(0)} = {reshaped(ctx, src, tuple_expr(dims))}")
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
        ctx.fail_if(f"{d} < 0", "ValueError", f"{op}: negative dimension")
        dims.append(d)
    lead = n - vvar.ndim
    for j in range(vvar.ndim):
        if vvar.type.shape[j] == 1:
            continue
        ctx.fail_if(all_of([f"{value}.shape[{j}] != 1", f"{value}.shape[{j}] != {dims[lead + j]}"]),
                    "ValueError", f"{op}: cannot broadcast the value to the target shape")
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
            ctx.fail_if(f"{x}.shape[{d}] != {xs[0]}.shape[{d}]", "ValueError",
                        f"{op}: the input shapes differ along axis {d}")
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
    ctx.fail_if(f"{step} == 0", "ValueError", f"{op}: step is zero")
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
                done = cgutils.alloca_once_value(builder, cgutils.false_bit)
                syrk = numpy_cblas_syrk().get(kind)
                if syrk is not None:  # a matrix times its own transpose (see blas.py)
                    _try_syrk(context, builder, module, syrk, dtype, isz, (m, n, k),
                              (a_data, as0, as1), (b_data, bs0, bs1), c_data, done)
                gemv = numpy_cblas_gemv().get(kind)
                if gemv is not None:  # a matrix times a vector (see blas.py)
                    with builder.if_then(builder.not_(builder.load(done))):
                        _try_gemv(context, builder, module, gemv, dtype, isz, (m, n, k),
                                  (a_data, as0, as1), (b_data, bs0, bs1), c_data, done)
                with builder.if_then(builder.not_(builder.load(done))):
                    _emit_gemm_call(context, builder, module, kind, dtype, isz, (m, n, k),
                                    (a_data, as0, as1), (b_data, bs0, bs1), c_data, status)
    builder.ret(builder.load(status))
    return fn


def _emit_gemm_call(context, builder, module, kind, dtype, isz, mnk, a, b, c_data, status):
    """gemm of C = A B (A, B: (data, byte stride 0, byte stride 1)), or the status bits of the
    operands it cannot read as they are."""
    m, n, k = mnk
    (a_data, as0, as1), (b_data, bs0, bs1) = a, b
    intp = m.type
    zero = ir.Constant(intp, 0)
    # row-major C = A B is column-major C^T = B^T A^T: B is gemm's first operand
    ta, lda, ok_a = _gemm_operand(builder, m, k, as0, as1, isz)
    tb, ldb, ok_b = _gemm_operand(builder, k, n, bs0, bs1, isz)
    bad = builder.or_(builder.zext(builder.not_(ok_a), intp),
                      builder.shl(builder.zext(builder.not_(ok_b), intp), ir.Constant(intp, 1)))
    builder.store(bad, status)
    with builder.if_then(builder.icmp_signed("==", bad, zero)):
        cblas = numpy_cblas_gemm().get(kind)
        if cblas is not None:  # numpy's own BLAS (see blas.py)
            _call_cblas(context, builder, module, cblas, dtype, tb, ta, n, m, k,
                        b_data, ldb, a_data, lda, c_data, n)
        else:
            xxgemm = cgutils.get_or_insert_function(module, _GEMM_FNTY, "numba_xxgemm")
            alpha = make_constant_slot(context, builder, dtype, 1.0)
            beta = make_constant_slot(context, builder, dtype, 0.0)
            res = builder.call(xxgemm, (
                ir.Constant(_ll_char, ord(kind)), tb, ta, n, m, k,
                builder.bitcast(alpha, _ll_void_p), b_data, ldb, a_data, lda,
                builder.bitcast(beta, _ll_void_p), c_data, n))
            check_blas_return(context, builder, res)


def _try_syrk(context, builder, module, symbol, dtype, isz, mnk, a, b, c_data, done):
    """C = A A^T through syrk `symbol` where B is A's transpose (one array seen both ways, as
    numpy's matmul checks: same data, m == n, strides swapped) and A has a unit-stride axis:
    the upper triangle's products, then the lower mirrored from it (C is C-contiguous), so C
    is exactly symmetric, as numpy's is; sets `done` when it ran."""
    m, n, k = mnk
    (a_data, as0, as1), (b_data, bs0, bs1) = a, b
    intp = m.type
    one = ir.Constant(intp, 1)
    flag, ld, ok = _gemm_operand(builder, m, k, as0, as1, isz)
    same = builder.and_(builder.icmp_unsigned("==", a_data, b_data),
                        builder.and_(builder.icmp_signed("==", m, n),
                                     builder.and_(builder.icmp_signed("==", as0, bs1),
                                                  builder.icmp_signed("==", as1, bs0))))
    with builder.if_then(builder.and_(builder.and_(same, ok), builder.icmp_signed(">", m, one))):
        # row-major A (m x k, 'n'): C = A A^T; else A's storage is A^T (k x m): C = X^T X
        row_major = builder.icmp_unsigned("==", flag, ir.Constant(_ll_char, ord("n")))
        i32 = ir.IntType(32)
        real = context.get_value_type(dtype)
        fnty = ir.FunctionType(ir.VoidType(), [i32, i32, i32, intp, intp, real, _ll_void_p, intp,
                                               real, _ll_void_p, intp])
        syrk = cgutils.get_or_insert_function(module, fnty, symbol)
        builder.call(syrk, (i32(ROW_MAJOR), i32(UPPER),
                            builder.select(row_major, i32(NO_TRANS), i32(TRANS)), m, k,
                            real(1.0), a_data, ld, real(0.0), c_data, m))
        c = builder.bitcast(c_data, real.as_pointer())
        with cgutils.for_range(builder, m) as row:
            with cgutils.for_range(builder, row.index) as col:
                above = builder.gep(c, [builder.add(builder.mul(col.index, m), row.index)])
                below = builder.gep(c, [builder.add(builder.mul(row.index, m), col.index)])
                builder.store(builder.load(above), below)
        builder.store(cgutils.true_bit, done)


def _try_gemv(context, builder, module, symbol, dtype, isz, mnk, a, b, c_data, done):
    """C = A B through gemv `symbol` where one side is a vector: n == 1 (A times the column
    B) or m == 1 (the row A times B, as B^T A^T), the matrix with a unit-stride axis and the
    vector's stride a positive whole number of elements; sets `done` when it ran (C is
    C-contiguous: one row or one column is a unit-stride vector)."""
    m, n, k = mnk
    (a_data, as0, as1), (b_data, bs0, bs1) = a, b
    intp = m.type
    one, size = ir.Constant(intp, 1), ir.Constant(intp, isz)
    column = builder.icmp_signed("==", n, one)
    with builder.if_then(builder.or_(column, builder.icmp_signed("==", m, one))):
        def pick(x, y):
            return builder.select(column, x, y)

        mat, r, c = pick(a_data, b_data), pick(m, k), pick(k, n)
        flag, ld, ok = _gemm_operand(builder, r, c, pick(as0, bs0), pick(as1, bs1), isz)
        step = pick(bs0, as1)  # the vector's byte stride along its length k
        inc = builder.sdiv(step, size)
        inc_ok = builder.and_(builder.icmp_signed("==", builder.srem(step, size),
                                                  ir.Constant(intp, 0)),
                              builder.icmp_signed(">=", inc, one))
        short = builder.icmp_signed("<=", k, one)
        with builder.if_then(builder.and_(ok, builder.or_(short, inc_ok))):
            # the r x c matrix is row-major ('n') or its transpose is (c x r); A b wants it as
            # it is, B^T a transposed
            row_major = builder.icmp_unsigned("==", flag, ir.Constant(_ll_char, ord("n")))
            transposed = builder.xor(builder.not_(column), builder.not_(row_major))
            i32 = ir.IntType(32)
            real = context.get_value_type(dtype)
            fnty = ir.FunctionType(ir.VoidType(), [i32, i32, intp, intp, real, _ll_void_p, intp,
                                                   _ll_void_p, intp, real, _ll_void_p, intp])
            gemv = cgutils.get_or_insert_function(module, fnty, symbol)
            builder.call(gemv, (i32(ROW_MAJOR), builder.select(transposed, i32(TRANS),
                                                                i32(NO_TRANS)),
                                builder.select(row_major, r, c), builder.select(row_major, c, r),
                                real(1.0), mat, ld, pick(b_data, a_data),
                                builder.select(short, one, inc), real(0.0), c_data, one))
            builder.store(cgutils.true_bit, done)


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


def _matrix_of(context, builder, ty, value, batch_index, transposed):
    """(data as i8*, (rows, cols), (row stride, column stride)) of the matrix a product reads
    from array `value` of type `ty`: the array itself (2-d), or its matrix `batch_index` (3-d;
    matrix 0 where its first length is 1); the transpose with `transposed`."""
    arr = make_array(ty)(context, builder, value)
    shape = cgutils.unpack_tuple(builder, arr.shape, ty.ndim)
    strides = cgutils.unpack_tuple(builder, arr.strides, ty.ndim)
    data = builder.bitcast(arr.data, _ll_void_p)
    if ty.ndim == 3:
        one = ir.Constant(shape[0].type, 1)
        first = builder.select(builder.icmp_signed("!=", shape[0], one), batch_index,
                               ir.Constant(shape[0].type, 0))
        data = builder.gep(data, [builder.mul(first, strides[0])])
        shape, strides = shape[1:], strides[1:]
    if transposed:
        shape, strides = shape[::-1], strides[::-1]
    return data, shape, strides


def _product_types_ok(out, *operands) -> bool:
    return (isinstance(out, types.Array) and out.layout == "C" and out.mutable
            and all(isinstance(t, types.Array) and t.dtype == out.dtype for t in operands)
            and out.dtype in (types.float32, types.float64))


@intrinsic
def _gemm_batch(typingctx, a, b, out, ta, tb):
    """out[i] = A_i @ B_i over the first axis of 3-d `out` (shapes checked by the caller): A_i
    is `a`'s matrix i (3-d `a`, C-contiguous; matrix 0 where its first length is 1) or `a`
    (2-d, C or F), transposed where `ta` (a literal bool: then `a` is the C array whose
    matrices' transposes are the operands); B_i likewise. A loop of gemm calls lowered in
    place: no function of its own to compile."""
    if not (_product_types_ok(out, a, b) and out.ndim == 3
            and isinstance(ta, types.BooleanLiteral) and isinstance(tb, types.BooleanLiteral)
            and all((t.ndim == 3 and t.layout == "C") or (t.ndim == 2 and t.layout in "CF"
                                                          and not flag.literal_value)
                    for t, flag in ((a, ta), (b, tb)))):
        return None
    ensure_blas()

    def codegen(context, builder, sig, args):
        fn = _gemm_function(context, builder.module, out.dtype)
        C = make_array(out)(context, builder, args[2])
        batch, step = cgutils.unpack_tuple(builder, C.shape, 3)[0], \
            cgutils.unpack_tuple(builder, C.strides, 3)[0]
        with cgutils.for_range(builder, batch) as loop:
            i = loop.index
            a_data, (m, k), a_strides = _matrix_of(context, builder, a, args[0], i,
                                                   ta.literal_value)
            b_data, (_, n), b_strides = _matrix_of(context, builder, b, args[1], i,
                                                   tb.literal_value)
            c_data = builder.gep(builder.bitcast(C.data, _ll_void_p), [builder.mul(i, step)])
            builder.call(fn, (a_data, m, k, *a_strides, b_data, n, *b_strides, c_data))
        return context.get_dummy_value()

    return types.none(a, b, out, ta, tb), codegen


@intrinsic
def _gemm_rows(typingctx, a, b, out):
    """out = a @ b for C-contiguous `a` and `out` of one rank >= 2 and a 2-d `b` (C or F):
    one gemm over the rows of all their leading axes, as numpy does, lowered in place."""
    if not (_product_types_ok(out, a, b) and a.layout == "C" and a.ndim == out.ndim >= 2
            and b.ndim == 2 and b.layout in "CF"):
        return None
    ensure_blas()

    def codegen(context, builder, sig, args):
        fn = _gemm_function(context, builder.module, out.dtype)
        A, C = make_array(a)(context, builder, args[0]), make_array(out)(context, builder,
                                                                           args[2])
        dims = cgutils.unpack_tuple(builder, A.shape, a.ndim)
        rows = dims[0]
        for d in dims[1:-1]:
            rows = builder.mul(rows, d)
        k, isz = dims[-1], A.itemsize
        b_data, (_, n), b_strides = _matrix_of(context, builder, b, args[1], None, False)
        builder.call(fn, (builder.bitcast(A.data, _ll_void_p), rows, k, builder.mul(k, isz),
                          isz, b_data, n, *b_strides, builder.bitcast(C.data, _ll_void_p)))
        return context.get_dummy_value()

    return types.none(a, b, out), codegen


HELPER_REFS.update(_gemm_batch=_gemm_batch, _gemm_rows=_gemm_rows)


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


# the largest k * n a vector-times-transposed-matrix product runs as dot products (above it
# gemm, which may use more cores)
ROW_DOTS_MAX = 256 * 256


@register_helper
@numba.njit(cache=False, no_cpython_wrapper=True, no_cfunc_wrapper=True, error_model="numpy",
            fastmath={"contract", "reassoc"})
def _row_dots(x, bt, y):
    """y = x @ bt.T for C-contiguous 1-d x, y and 2-d bt: a vector times a transposed matrix
    (the row of a backward loop's `da @ w.T`), as dot products of x with bt's rows, four at a
    time. gemm packs the transposed operand at every call: 1x64 @ 64x64 float64 took 355 ns,
    these dots 227 (float32: 205 and 150)."""
    prefer_wide_vectors()
    k, n = bt.shape
    zero = y.dtype.type(0)
    i = 0
    while i + 4 <= k:
        s0 = s1 = s2 = s3 = zero
        r0, r1, r2, r3 = bt[i], bt[i + 1], bt[i + 2], bt[i + 3]
        for j in range(n):
            xj = x[j]
            s0 += xj * r0[j]
            s1 += xj * r1[j]
            s2 += xj * r2[j]
            s3 += xj * r3[j]
        y[i], y[i + 1], y[i + 2], y[i + 3] = s0, s1, s2, s3
        i += 4
    while i < k:
        s = zero
        r = bt[i]
        for j in range(n):
            s += x[j] * r[j]
        y[i] = s
        i += 1


# columns of y a row-times-matrix product keeps in registers at once: ROW_TIMES_VECTORS
# vectors of a 512-bit register's lanes (LLVM splits them where registers are narrower)
ROW_TIMES_VECTORS = 8


@intrinsic
def _row_times(typingctx, x, w, y):
    """y = x @ w for C-contiguous 1-d x (k), y (n) and 2-d w (k, n) of one float dtype: a row
    (a recurrent step's h @ W) times a matrix, its columns in blocks whose sums stay in vector
    registers across the k rows of w (one broadcast of x[p] and a fused multiply-add per
    vector), then in blocks of half as many, then one vector at a time, then one column at a
    time. gemm packs both operands
    at every call: 1x64 @ 64x64 float64 took 326 ns; numba's loops, which load and store the
    sums at each row, 830-1100 ns."""
    arrays = (x, w, y)
    if not (all(isinstance(a, types.Array) and a.layout == "C" for a in arrays)
            and (x.ndim, w.ndim, y.ndim) == (1, 2, 1) and x.dtype == w.dtype == y.dtype
            and x.dtype in (types.float32, types.float64)):
        return None

    def codegen(context, builder, sig, args):
        xs, ws, ys = (context.make_array(t)(context, builder, v) for t, v in zip(arrays, args))
        k, n = cgutils.unpack_tuple(builder, ws.shape, 2)
        real = context.get_value_type(x.dtype)
        lanes = 64 // context.get_abi_sizeof(real)
        intp = k.type
        i32 = ir.IntType(32)
        done = cgutils.alloca_once_value(builder, intp(0))  # columns computed so far
        for vectors in (ROW_TIMES_VECTORS, ROW_TIMES_VECTORS // 2, 1):
            width = lanes * vectors
            vty = ir.VectorType(real, lanes)
            sums = [cgutils.alloca_once(builder, vty) for _ in range(vectors)]
            with cgutils.loop_nest(builder, [builder.sdiv(builder.sub(n, builder.load(done)),
                                                          intp(width))], intp):
                first = builder.load(done)
                for s in sums:
                    builder.store(ir.Constant(vty, [0.0] * lanes), s)
                with cgutils.for_range(builder, k) as loop:
                    xp = builder.load(builder.gep(xs.data, [loop.index]))
                    one = builder.insert_element(ir.Constant(vty, ir.Undefined), xp, i32(0))
                    xv = builder.shuffle_vector(one, ir.Constant(vty, ir.Undefined),
                                                ir.Constant(ir.VectorType(i32, lanes),
                                                            [0] * lanes))
                    row = builder.add(builder.mul(loop.index, n), first)
                    for c, s in enumerate(sums):
                        at = builder.gep(ws.data, [builder.add(row, intp(c * lanes))])
                        wv = builder.load(builder.bitcast(at, vty.as_pointer()),
                                          align=context.get_abi_sizeof(real))
                        builder.store(_fma(builder, xv, wv, builder.load(s)), s)
                for c, s in enumerate(sums):
                    at = builder.gep(ys.data, [builder.add(first, intp(c * lanes))])
                    builder.store(builder.load(s), builder.bitcast(at, vty.as_pointer()),
                                  align=context.get_abi_sizeof(real))
                builder.store(builder.add(first, intp(width)), done)
        with cgutils.for_range(builder, builder.sub(n, builder.load(done))) as column:
            j = builder.add(builder.load(done), column.index)
            total = cgutils.alloca_once_value(builder, ir.Constant(real, 0.0))
            with cgutils.for_range(builder, k) as loop:
                xp = builder.load(builder.gep(xs.data, [loop.index]))
                wp = builder.load(builder.gep(ws.data, [builder.add(builder.mul(loop.index, n),
                                                                    j)]))
                builder.store(_fma(builder, xp, wp, builder.load(total)), total)
            builder.store(builder.load(total), builder.gep(ys.data, [j]))
        return context.get_dummy_value()

    return types.none(x, w, y), codegen


HELPER_REFS["row_times"] = _row_times


def _fma(builder, a, b, c):
    """a * b + c rounded once (llvm.fma), for floats and vectors of them."""
    ty = a.type
    scalar = ty.element if isinstance(ty, ir.VectorType) else ty
    name = "f64" if isinstance(scalar, ir.DoubleType) else "f32"
    if isinstance(ty, ir.VectorType):
        name = f"v{ty.count}{name}"
    fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ty, [ty] * 3),
                                         f"llvm.fma.{name}")
    return builder.call(fma, [a, b, c])


def _batched_gemm_source(name: str, a3: bool, b3: bool, ta: bool, tb: bool) -> str:
    """A function out[i] = A_i @ B_i over the first axis of 3-d `out` (_gemm_batch's product)
    where an operand is typed 'A': one gemm cannot take is copied, and the gemm called again
    (the copy's code is what costs: _gemm_batch lowers the other products in place)."""
    def operand(x, batched, t):
        m = f"{x}[i if {x}.shape[0] != 1 else 0]" if batched else x
        return f"{m}.T" if t else m

    return "\n".join([
        f"def {name}(a, b, out):", "    for i in range(out.shape[0]):",
        f"        x = {operand('a', a3, ta)}", f"        y = {operand('b', b3, tb)}",
        "        if _gemm(x, y, out[i]) != 0:",
        "            _gemm(c_contiguous(x), c_contiguous(y), out[i])"]) + "\n"


def _batched_gemms() -> dict:
    """Every variant of _batched_gemm_source, by name (jitted when first called)."""
    out = {}
    for a3, b3, ta, tb in itertools.product((False, True), repeat=4):
        if not (a3 or b3) or (ta and not a3) or (tb and not b3):
            continue
        name = "bgemm_{}{}_{}{}".format("bB"[a3], "bB"[b3], "nt"[ta], "nt"[tb])
        namespace = {"_gemm": _gemm, "np": np, "c_contiguous": c_contiguous}
        exec(_batched_gemm_source(name, a3, b3, ta, tb), namespace)
        out[name] = numba.njit(cache=False, no_cpython_wrapper=True, no_cfunc_wrapper=True)(
            namespace[name])
    return out


# one function per form of a batched product with an 'A' operand, shared by every program
BATCHED_GEMMS = _batched_gemms()
HELPER_REFS.update(BATCHED_GEMMS)


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
    steps = []  # (name, axis): where index i of a batch axis reads element i, or 0 (length 1)
    for j in range(nbatch):
        cands = []
        for name, var, idx in ((a, va, ia), (b, vb, ib)):
            axis = j - (nbatch - (var.ndim - 2))
            if axis < 0:
                continue
            if var.type.shape[axis] == 1:
                idx.append("0")
                continue
            steps.append((name, axis))
            idx.append(f"{loop[j]} * {{{len(steps) - 1}}}")
            cands.append(f"{name}.shape[{axis}]")
        dims.append(broadcast_dim(ctx, cands, f"{op}: batch dimensions cannot be broadcast"))
    dims += [f"{a}.shape[{va.ndim - 2}]", f"{b}.shape[{vb.ndim - 1}]"]
    out = ctx.alloc(0, tuple_expr(dims))
    blas = storage_dtype(out_dtype) in ("float32", "float64")  # (float16: in float32)
    if blas:  # one dtype for gemm: convert the other operand once
        for i, (var, name) in enumerate(((va, a), (vb, b))):
            if var.dtype != out_dtype:
                conv = ctx.fresh("cv")
                # (C first: numba's astype keeps an F array's layout, seed 26378)
                source = name if layouts[i] == "C" else ctx.contiguous(name)
                ctx.line(f"{conv} = {source}.astype({np_dtype(out_dtype)})")
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
    row_kernel = {("C", "F"): ("row_dots", _row_dots, f"{b}.T"),
                  ("C", "C"): ("row_times", _row_times, b)}.get(tuple(layouts))
    if (row_kernel and blas and not nbatch and va.type.shape[0] == 1
            and storage_dtype(out_dtype) == out_dtype):
        # a row vector times a matrix: dot products with a transposed matrix's rows, or sums
        # in registers over a matrix's rows (a recurrent step's h @ W)
        name, kernel, right = row_kernel
        ctx.line(f"if {b}.size <= {ROW_DOTS_MAX}:")
        with ctx.indent():
            ctx.line(f"{ctx.helper(name, kernel)}({a}[0], {right}, {out}[0])")
        ctx.line("else:")
        with ctx.indent():
            ctx.line(f"{fn}({a}, {b}, {out})")
        return
    if blas and nbatch and vb.ndim == 2 and layouts[0] == "C":
        # (..., M, K) @ (K, N) with a C-contiguous `a`: one gemm over all its rows, as numpy
        right = b if layouts[1] != "A" else ctx.contiguous(b)
        ctx.line(f"{ctx.helper('gemm_rows', _gemm_rows)}({a}, {right}, {out})")
        _round_half(ctx, out, out_dtype)
        return
    if blas and nbatch == 1:
        _emit_batched(ctx, (a, b), (va, vb), layouts, out, nd)
        _round_half(ctx, out, out_dtype)
        return
    if steps:  # (the index of a batch axis: i times 0 or 1)
        names = [ctx.fresh("sa") for _ in steps]
        for step, (name, axis) in zip(names, steps):
            ctx.line(f"{step} = int({name}.shape[{axis}] != 1)")
        ia, ib = ([e.format(*names) for e in idx] for idx in (ia, ib))
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
        fixed = [ctx.contiguous(x) if lay == "A" else x
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


def _emit_batched(ctx, names, variables, layouts, out, nd) -> None:
    """One call of the BATCHED_GEMMS function for a product with one batch axis."""
    operands, flags = [], []
    for i, (name, var) in enumerate(zip(names, variables)):
        base = ctx.swapped_base(i) if layouts[i] == "A" and var.ndim == nd else None
        if base is not None:  # (its matrices are the transposes of a C array's)
            name, layouts[i] = base, "C"
        operands.append(name)
        flags.append(base is not None)
    # a C 3-d array's matrices, and a C or F matrix, always suit gemm; others may not
    if all(lay == "C" or (v.ndim == 2 and lay == "F") for v, lay in zip(variables, layouts)):
        fn = ctx.helper("gemm_batch", _gemm_batch)
        ctx.line(f"{fn}({operands[0]}, {operands[1]}, {out}, {flags[0]}, {flags[1]})")
        return
    helper = "bgemm_{}{}_{}{}".format(*("bB"[v.ndim == nd] for v in variables),
                                      *("nt"[t] for t in flags))
    ctx.line(f"{ctx.helper(helper, BATCHED_GEMMS[helper])}({operands[0]}, {operands[1]}, "
             f"{out})")


def _round_half(ctx, out: str, out_dtype: str) -> None:
    if out_dtype == "float16":  # computed in float32: rounded to half precision
        flat, k = ctx.fresh("of"), ctx.fresh("k")
        ctx.line(f"{flat} = {reshaped(ctx, out, f'{out}.size')}")
        ctx.line(f"for {k} in range({out}.size):")
        with ctx.indent():
            ctx.line(f"{flat}[{k}] = {cast_expr(f'{flat}[{k}]', out_dtype, ctx.src)}")


_ = np
