"""numba intrinsics that generated programs call where numba's own lowering is slow to compile.

A program is one big function and numba's compile time grows with every statement of it:
`a.reshape(shape)` lowers to a C-helper call, tuple packing and error paths (measured 10-30 ms
of compile per call site), where a view of a C-contiguous array needs only a new shape and
strides. `reshaped` writes the cheap form where the array is known to be C-contiguous.
`np.empty` is an overload numba compiles as a function of its own for every (shape type,
dtype) a program uses (40-150 ms each); `empty_c` lowers the allocation in place.
"""

from __future__ import annotations

import functools
import sys

import llvmlite.binding as ll
from llvmlite import ir as llvm_ir
from numba.core import cgutils, types
from numba.core.extending import intrinsic

from verglas.config import config
from verglas.cpu_backend.dtypes import np_dtype

try:  # numba's own lowering of np.empty's body (numba.np.arrayobj, stable for years)
    from numba.np.arrayobj import _empty_nd_impl, _parse_shape
except ImportError:  # pragma: no cover - then programs call np.empty
    _empty_nd_impl = _parse_shape = None

__all__ = ["RuntimeBroadcast", "c_view", "c_contiguous", "c_row", "own_row", "c_head", "permuted",
           "empty_c", "scalars_at", "reshaped", "empty_expr", "zero_d", "ws_take", "ws_add",
           "ws_reserve", "ws_carve", "float_to_int", "select", "reshape_lengths",
           "broadcast_length", "RAISE_IF", "WORKSPACE_TOO_BIG",
           "WORKSPACE_ALIGN"]

WORKSPACE_ALIGN = 64  # bytes: every array carved from a workspace starts on a cache line


class RuntimeBroadcast(Exception):
    """Raised by a specialized program (ProgramSource.specialized) when an input's length-1 dim
    broadcasts at run time, or mismatches, or a storage slot shared on that assumption has
    another size: the general program handles the call instead (and raises numpy's error when
    the shapes are incompatible)."""


@intrinsic
def c_view(typingctx, arr, shape):
    """`arr.reshape(shape)` for a C-contiguous `arr` (`shape`: an integer or a tuple of
    integers): the same data with new shape and C strides; only the size is checked: the
    memory plan of a specialized program shares storage between sizes its checks take to be
    equal, so another size raises RuntimeBroadcast (the general program, whose plan shares
    equal sizes only, then runs). Arrays numba does not type as 'C' take numba's reshape."""
    if not isinstance(arr, types.Array):
        return None
    if isinstance(shape, types.Integer):
        dim_types = [shape]
    elif isinstance(shape, types.BaseTuple) and all(isinstance(t, types.Integer) for t in shape):
        dim_types = list(shape)
    else:
        return None
    ret = types.Array(arr.dtype, len(dim_types), "C")
    sig = ret(arr, shape)

    def codegen(context, builder, sig, args):
        if arr.layout != "C":  # numba checks contiguity at run time (and raises if not)
            return context.compile_internal(builder, lambda a, s: a.reshape(s), sig, args)
        src = context.make_array(arr)(context, builder, args[0])
        values = [args[1]] if isinstance(shape, types.Integer) \
            else cgutils.unpack_tuple(builder, args[1], len(dim_types))
        intp = context.get_value_type(types.intp)
        dims = [context.cast(builder, v, t, types.intp) for v, t in zip(values, dim_types)]
        strides, step = [], src.itemsize
        for d in reversed(dims):
            strides.append(step)
            step = builder.mul(step, d)
        size = builder.udiv(step, src.itemsize)
        old_size = context.get_constant(types.intp, 1)
        for d in cgutils.unpack_tuple(builder, src.shape, arr.ndim):
            old_size = builder.mul(old_size, d)
        with cgutils.if_unlikely(builder, builder.icmp_signed("!=", size, old_size)):
            context.call_conv.return_user_exc(
                builder, RuntimeBroadcast, ("a program's view of an array changes its size",))
        out = context.make_array(ret)(context, builder)
        context.populate_array(out, data=src.data,
                               shape=cgutils.pack_array(builder, dims, ty=intp),
                               strides=cgutils.pack_array(builder, strides[::-1], ty=intp),
                               itemsize=src.itemsize, meminfo=src.meminfo, parent=src.parent)
        result = out._getvalue()
        context.nrt.incref(builder, ret, result)  # the view holds its own reference
        return result

    return sig, codegen


@intrinsic
def c_row(typingctx, arr, index):
    """`arr[index]` as a C-contiguous array (a row of a sequence read in place by a loop, also
    where `arr` steps backwards along axis 0); the caller guarantees that the rows are
    C-contiguous and `index` is in bounds."""
    if not (isinstance(arr, types.Array) and arr.ndim >= 2 and isinstance(index, types.Integer)):
        return None
    ret = types.Array(arr.dtype, arr.ndim - 1, "C")

    def codegen(context, builder, sig, args):
        src = context.make_array(arr)(context, builder, args[0])
        intp = context.get_value_type(types.intp)
        at = context.cast(builder, args[1], index, types.intp)
        shape = cgutils.unpack_tuple(builder, src.shape, arr.ndim)[1:]
        stride0 = cgutils.unpack_tuple(builder, src.strides, arr.ndim)[0]
        byte = builder.gep(builder.bitcast(src.data, llvm_ir.IntType(8).as_pointer()),
                           [builder.mul(at, stride0)])
        strides, step = [], src.itemsize
        for d in reversed(shape):
            strides.append(step)
            step = builder.mul(step, d)
        out = context.make_array(ret)(context, builder)
        context.populate_array(out, data=builder.bitcast(byte, src.data.type),
                               shape=cgutils.pack_array(builder, shape, ty=intp),
                               strides=cgutils.pack_array(builder, strides[::-1], ty=intp),
                               itemsize=src.itemsize, meminfo=src.meminfo,
                               parent=cgutils.get_null_value(src.parent.type))
        result = out._getvalue()
        context.nrt.incref(builder, ret, result)
        return result

    return ret(arr, index), codegen


@intrinsic
def own_row(typingctx, arr):
    """`arr` itself, its data pointer hidden from LLVM's analysis of where it came from: the
    row a loop step writes, of a buffer whose other rows the step reads. LLVM otherwise checks
    once, before the step loop, whether the whole buffer's written and read ranges overlap
    (they always do) and runs every vectorized loop of the body scalar: a vector recurrence's
    tanh took 7 ns per element instead of 1.4. Hidden, the check is the step's own rows."""
    if not isinstance(arr, types.Array):
        return None

    def codegen(context, builder, sig, args):
        ary = context.make_array(arr)(context, builder, args[0])
        ptr = ary.data
        launder = llvm_ir.InlineAsm(llvm_ir.FunctionType(ptr.type, [ptr.type]), "", "=r,0")
        ary.data = builder.call(launder, [ptr])
        result = ary._getvalue()
        context.nrt.incref(builder, arr, result)
        return result

    return arr(arr), codegen


@intrinsic
def c_head(typingctx, arr, count):
    """`arr[:count]` of a C-contiguous `arr` as a C-contiguous array (the entries of the steps
    a loop that stopped early ran); the caller guarantees 0 <= count <= len(arr)."""
    if not (isinstance(arr, types.Array) and arr.layout == "C" and arr.ndim >= 1
            and isinstance(count, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        src = context.make_array(arr)(context, builder, args[0])
        intp = context.get_value_type(types.intp)
        shape = cgutils.unpack_tuple(builder, src.shape, arr.ndim)
        shape[0] = context.cast(builder, args[1], count, types.intp)
        out = context.make_array(arr)(context, builder)
        context.populate_array(out, data=src.data,
                               shape=cgutils.pack_array(builder, shape, ty=intp),
                               strides=src.strides, itemsize=src.itemsize,
                               meminfo=src.meminfo, parent=src.parent)
        result = out._getvalue()
        context.nrt.incref(builder, arr, result)
        return result

    return arr(arr, count), codegen


@intrinsic
def permuted(typingctx, arr, axes):
    """`np.transpose(arr, axes)` for a literal tuple `axes` (as "1, 0" in a string: numba types
    it literal): the same data with the shape and strides permuted (numba's own transpose
    compiles its error formatting, ~1 s per signature). A reversal of a C (F) array is F (C),
    other orders 'A'."""
    if not isinstance(arr, types.Array) or not isinstance(axes, types.StringLiteral):
        return None
    order = [int(a) for a in axes.literal_value.split(",")]
    if sorted(order) != list(range(arr.ndim)):
        return None
    if order == list(range(arr.ndim)):
        layout = arr.layout
    elif order == list(range(arr.ndim))[::-1]:
        layout = {"C": "F", "F": "C"}.get(arr.layout, "A")
    else:
        layout = "A"
    ret = types.Array(arr.dtype, arr.ndim, layout)

    def codegen(context, builder, sig, args):
        src = context.make_array(arr)(context, builder, args[0])
        intp = context.get_value_type(types.intp)
        shape = cgutils.unpack_tuple(builder, src.shape, arr.ndim)
        strides = cgutils.unpack_tuple(builder, src.strides, arr.ndim)
        out = context.make_array(ret)(context, builder)
        context.populate_array(out, data=src.data,
                               shape=cgutils.pack_array(builder, [shape[a] for a in order],
                                                        ty=intp),
                               strides=cgutils.pack_array(builder, [strides[a] for a in order],
                                                          ty=intp),
                               itemsize=src.itemsize, meminfo=src.meminfo, parent=src.parent)
        result = out._getvalue()
        context.nrt.incref(builder, ret, result)
        return result

    return ret(arr, axes), codegen


@intrinsic
def c_contiguous(typingctx, arr):
    """`np.ascontiguousarray(arr)` for an array of 1 or more dims: `arr` itself where it is
    C-contiguous (checked at run time unless its type says so), else a C-contiguous copy
    (numba's own compiles a contiguity check and its overload as functions of their own,
    ~250 ms per signature; here both are a few instructions in place)."""
    if not isinstance(arr, types.Array) or arr.ndim == 0:
        return None
    ret = arr.copy(layout="C", readonly=False)  # (numba's type for it)

    def codegen(context, builder, sig, args):
        if arr.layout == "C":
            context.nrt.incref(builder, arr, args[0])
            return args[0]
        src = context.make_array(arr)(context, builder, args[0])
        intp = context.get_value_type(types.intp)
        shape = cgutils.unpack_tuple(builder, src.shape, arr.ndim)
        strides = cgutils.unpack_tuple(builder, src.strides, arr.ndim)
        # numpy's flag: each dim longer than 1 steps by the item times the dims after it
        # (an empty array is contiguous)
        contiguous, empty, step = cgutils.true_bit, cgutils.false_bit, src.itemsize
        for d, n in reversed(list(zip(strides, shape))):
            fine = builder.or_(builder.icmp_signed("<=", n, intp(1)),
                               builder.icmp_signed("==", d, step))
            contiguous = builder.and_(contiguous, fine)
            empty = builder.or_(empty, builder.icmp_signed("==", n, intp(0)))
            step = builder.mul(step, n)
        slot = cgutils.alloca_once(builder, context.get_value_type(ret))
        with builder.if_else(builder.or_(contiguous, empty), likely=True) as (same, copy):
            with same:
                c_strides, item = [], src.itemsize
                for n in reversed(shape):
                    c_strides.append(item)
                    item = builder.mul(item, n)
                out = context.make_array(ret)(context, builder)
                context.populate_array(out, data=src.data,
                                       shape=cgutils.pack_array(builder, shape, ty=intp),
                                       strides=cgutils.pack_array(builder, c_strides[::-1],
                                                                  ty=intp),
                                       itemsize=src.itemsize, meminfo=src.meminfo,
                                       parent=src.parent)
                context.nrt.incref(builder, ret, out._getvalue())
                builder.store(out._getvalue(), slot)
            with copy:
                out = _empty_nd_impl(context, builder, ret, shape)
                out_strides = cgutils.unpack_tuple(builder, out.strides, arr.ndim)
                with cgutils.loop_nest(builder, shape, intp) as index:
                    at = cgutils.get_item_pointer2(context, builder, src.data, shape, strides,
                                                   arr.layout, index)
                    to = cgutils.get_item_pointer2(context, builder, out.data, shape,
                                                   out_strides, "C", index)
                    builder.store(builder.load(at), to)
                builder.store(out._getvalue(), slot)
        return builder.load(slot)

    return ret(arr), codegen


@intrinsic
def scalars_at(typingctx, arr, start, count):
    """The tuple (arr[start], ..., arr[start + count - 1]) for a literal `count`: one call,
    where indexing element by element costs numba a few milliseconds of compile time each."""
    if not isinstance(count, types.IntegerLiteral):
        return None
    ret = types.UniTuple(arr.dtype, count.literal_value)

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        items = []
        for k in range(count.literal_value):
            index = builder.add(args[1], llvm_ir.Constant(args[1].type, k))
            ptr = builder.gep(ary.data, [index], inbounds=True)
            items.append(context.unpack_value(builder, arr.dtype, ptr))
        return context.make_tuple(builder, ret, items)

    return ret(arr, start, count), codegen


def reshaped(ctx, name: str, shape_expr: str, contiguous: bool = True) -> str:
    """The expression of `name` viewed with shape `shape_expr` (an int or tuple expression):
    a c_view where the codegen knows `name` is C-contiguous, else numba's reshape."""
    if not contiguous:
        return f"{name}.reshape({shape_expr})"
    return f"{ctx.helper('view', c_view)}({name}, {shape_expr})"


def _item_and_dims(dtype, shape):
    """(numba item type, dim types) of a (dtype, shape) argument pair, or None."""
    if isinstance(dtype, types.NumberClass):
        item = dtype.instance_type
    elif isinstance(dtype, types.DType):
        item = dtype.dtype
    else:
        return None
    if isinstance(shape, types.Integer):
        return item, [shape]
    if isinstance(shape, types.BaseTuple) and all(isinstance(t, types.Integer) for t in shape):
        return item, list(shape)
    return None


def _dims(context, builder, shape_type, value, dim_types) -> list:
    values = [value] if isinstance(shape_type, types.Integer) \
        else cgutils.unpack_tuple(builder, value, len(dim_types))
    return [context.cast(builder, v, t, types.intp) for v, t in zip(values, dim_types)]


def _carve(context, builder, ws_type, ws_value, ret, start, dims):
    """The array of type `ret` and `dims` at byte `start` of workspace `ws_value`; it holds a
    reference to the workspace."""
    intp = context.get_value_type(types.intp)
    itemsize = context.get_abi_sizeof(context.get_data_type(ret.dtype))
    src = context.make_array(ws_type)(context, builder, ws_value)
    out = context.make_array(ret)(context, builder)
    strides, step = [], intp(itemsize)
    for d in reversed(dims):
        strides.append(step)
        step = builder.mul(step, d)
    context.populate_array(
        out, data=builder.bitcast(builder.gep(src.data, [start], inbounds=True), out.data.type),
        shape=cgutils.pack_array(builder, dims, ty=intp),
        strides=cgutils.pack_array(builder, strides[::-1], ty=intp),
        itemsize=intp(itemsize), meminfo=src.meminfo,
        parent=cgutils.get_null_value(src.parent.type))
    value = out._getvalue()
    context.nrt.incref(builder, ret, value)
    return value


def _end_of(context, builder, start, item, dims):
    """(`start` plus the bytes of an array of `item` and `dims`, rounded up to WORKSPACE_ALIGN;
    whether that size overflowed, reached WORKSPACE_TOO_BIG, or a dim is negative)."""
    intp = context.get_value_type(types.intp)
    nbytes = intp(context.get_abi_sizeof(context.get_data_type(item)))
    bad = llvm_ir.Constant(llvm_ir.IntType(1), 0)
    for d in dims:
        product = builder.smul_with_overflow(nbytes, d)
        nbytes = builder.extract_value(product, 0)
        bad = builder.or_(bad, builder.extract_value(product, 1))
        bad = builder.or_(bad, builder.icmp_signed("<", d, intp(0)))
    bad = builder.or_(bad, builder.icmp_unsigned(">=", nbytes, intp(WORKSPACE_TOO_BIG)))
    mask = intp(WORKSPACE_ALIGN - 1)
    end = builder.and_(builder.add(builder.add(start, nbytes), mask), builder.not_(mask))
    return end, bad


@intrinsic
def empty_c(typingctx, shape, dtype):
    """np.empty(shape, dtype) (a C-contiguous array), lowered where it is called."""
    found = _item_and_dims(dtype, shape)
    if found is None:
        return None
    ret = types.Array(found[0], len(found[1]), "C")

    def codegen(context, builder, sig, args):
        dims = _parse_shape(context, builder, sig.args[0], args[0])  # (negative dims raise)
        array = _empty_nd_impl(context, builder, ret, dims)
        if sys.platform.startswith("linux"):
            _ask_for_huge_pages(context, builder, array, found[0], dims)
        return array._getvalue()

    return ret(shape, dtype), codegen


HUGE_PAGES_FROM = 1 << 22  # bytes (numpy's own threshold)
_MADV_HUGEPAGE = 14


def _ask_for_huge_pages(context, builder, array, item, dims) -> None:
    """madvise(MADV_HUGEPAGE) over a new array of HUGE_PAGES_FROM bytes or more, from its
    first page boundary, as numpy does for its own: a fresh 64 MB output otherwise takes
    16k page faults when first written (x * 2 over 4096 x 4096 float32: 25 ms against
    numpy's 10). Linux only; the kernel may say no, and nothing changes."""
    intp = context.get_value_type(types.intp)
    nbytes = intp(context.get_abi_sizeof(context.get_data_type(item)))
    for d in dims:
        nbytes = builder.mul(nbytes, d)
    with builder.if_then(builder.icmp_signed(">=", nbytes, intp(HUGE_PAGES_FROM)),
                         likely=False):
        start = builder.ptrtoint(array.data, intp)
        offset = builder.and_(builder.sub(intp(0), start), intp(4095))  # to the next page
        void_p = llvm_ir.IntType(8).as_pointer()
        fnty = llvm_ir.FunctionType(llvm_ir.IntType(32),
                                    [void_p, intp, llvm_ir.IntType(32)])
        madvise = cgutils.get_or_insert_function(builder.module, fnty, "madvise")
        builder.call(madvise, [builder.inttoptr(builder.add(start, offset), void_p),
                               builder.sub(nbytes, offset), llvm_ir.IntType(32)(_MADV_HUGEPAGE)])


def _saturated_int(builder, value, signed: bool):
    """LLVM IR of float `value` converted to int64 (`signed`) or uint64, rounded toward zero,
    with NaN as 0 and values beyond the range clamped first: defined for every input.
    (Compares and selects: llvm.fptosi.sat does not vectorize here.)"""
    ty = value.type
    bound = 2.0 ** (63 if signed else 64)
    top = bound * (1 - 2.0 ** (-24 if str(ty) == "float" else -53))  # the largest float below
    low = -bound if signed else 0.0
    value = builder.select(builder.fcmp_unordered("uno", value, value),
                           llvm_ir.Constant(ty, 0.0), value)
    value = builder.select(builder.fcmp_ordered(">", value, llvm_ir.Constant(ty, top)),
                           llvm_ir.Constant(ty, top), value)
    value = builder.select(builder.fcmp_ordered("<", value, llvm_ir.Constant(ty, low)),
                           llvm_ir.Constant(ty, low), value)
    i64 = llvm_ir.IntType(64)
    return builder.fptosi(value, i64) if signed else builder.fptoui(value, i64)


@intrinsic
def float_to_int(typingctx, x, signed):
    """float32/float64 `x` truncated to int64 (a literal True `signed`) or uint64, defined
    for every input: NaN gives 0, values beyond the range saturate, and a negative value
    converted to uint64 wraps around as numpy's does (the int64 conversion's bits).

    numba's own conversion is LLVM's fptosi/fptoui, whose result for NaN, inf or an
    out-of-range value is poison: folded on a NaN LLVM could see, a cast came out as a
    different value at each call. (numpy leaves those values unspecified, not random.)"""
    if not isinstance(x, types.Float) or not isinstance(signed, types.BooleanLiteral):
        return None
    ret = types.int64 if signed.literal_value else types.uint64

    def codegen(context, builder, sig, args):
        value = args[0]
        as_signed = _saturated_int(builder, value, True)
        if signed.literal_value:
            return as_signed
        negative = builder.fcmp_ordered("<", value, llvm_ir.Constant(value.type, 0.0))
        return builder.select(negative, as_signed, _saturated_int(builder, value, False))

    return ret(x, signed), codegen


@intrinsic
def select(typingctx, cond, a, b):
    """`a if cond else b` as one LLVM select: numba makes blocks of a conditional expression,
    and every block costs compile time in all of its passes over a program function (both
    `a` and `b` are evaluated: callers pass values, not expressions that may fail)."""
    ty = typingctx.unify_types(a, b)
    if ty is None:
        return None

    def codegen(context, builder, sig, args):
        c = context.cast(builder, args[0], sig.args[0], types.boolean)
        return builder.select(c, context.cast(builder, args[1], sig.args[1], ty),
                              context.cast(builder, args[2], sig.args[2], ty))

    return ty(cond, a, b), codegen


@intrinsic
def reshape_lengths(typingctx, size, dims, op):
    """The lengths of a reshape of `size` elements to `dims` (integers), with numpy's checks
    (ValueError naming `op`, a literal string): at most one unknown length (any negative one,
    as numpy takes it), the sizes agree; the unknown one becomes the length it stands for.
    One call where the same checks written out in a program cost ~45 numba statements."""
    if not (isinstance(size, types.Integer) and isinstance(op, types.StringLiteral)
            and isinstance(dims, types.BaseTuple) and len(dims) >= 1
            and all(isinstance(t, types.Integer) for t in dims)):
        return None
    name = op.literal_value
    ret = types.UniTuple(types.intp, len(dims))

    def codegen(context, builder, sig, args):
        intp = context.get_value_type(types.intp)
        n = context.cast(builder, args[0], sig.args[0], types.intp)
        values = [context.cast(builder, v, t, types.intp) for v, t in
                  zip(cgutils.unpack_tuple(builder, args[1], len(dims)), dims)]
        unknown = [builder.icmp_signed("<", v, intp(0)) for v in values]

        def fail_if(condition, message):
            with cgutils.if_unlikely(builder, condition):
                context.call_conv.return_user_exc(builder, ValueError, (f"{name}: {message}",))

        count = intp(0)
        known = intp(1)
        for v, u in zip(values, unknown):
            count = builder.add(count, builder.zext(u, intp))
            known = builder.mul(known, builder.select(u, intp(1), v))
        fail_if(builder.icmp_signed(">", count, intp(1)), "more than one -1 in the new shape")
        one = builder.icmp_signed("==", count, intp(1))
        divisor = builder.select(builder.icmp_signed("==", known, intp(0)), intp(1), known)
        uneven = builder.or_(builder.icmp_signed("==", known, intp(0)),
                             builder.icmp_signed("!=", builder.srem(n, divisor), intp(0)))
        fail_if(builder.and_(one, uneven), "cannot reshape the array into the new shape")
        fail_if(builder.and_(builder.not_(one), builder.icmp_signed("!=", known, n)),
                "cannot reshape the array into the new shape (sizes differ)")
        missing = builder.sdiv(n, divisor)
        return context.make_tuple(builder, ret, [builder.select(u, missing, v)
                                                 for v, u in zip(values, unknown)])

    return ret(size, dims, op), codegen


@intrinsic
def broadcast_length(typingctx, a, b):
    """numpy's broadcasting of two dimension lengths (-1 when incompatible), as selects
    lowered in place (as a jitted function of its own it cost ~40 ms of compile a process)."""
    if not (isinstance(a, types.Integer) and isinstance(b, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        x, y = (context.cast(builder, v, t, types.intp) for v, t in zip(args, sig.args))
        one, minus = (context.get_constant(types.intp, k) for k in (1, -1))
        keep = builder.or_(builder.icmp_signed("==", x, y), builder.icmp_signed("==", y, one))
        other = builder.select(builder.icmp_signed("==", x, one), y, minus)
        return builder.select(keep, x, other)

    return types.intp(a, b), codegen


def _raise_if(exc: type):
    @intrinsic
    def raise_if(typingctx, cond, message):
        """Raise `exc(message)` (a literal string) from the calling function when `cond`.

        What `if cond: raise exc(message)` does, without the two blocks numba makes of it:
        measured on a transformer's gradient (52 checks), 18% of its program's compile time.
        """
        if not isinstance(message, types.StringLiteral):
            return None
        text = message.literal_value

        def codegen(context, builder, sig, args):
            failed = context.cast(builder, args[0], sig.args[0], types.boolean)
            with cgutils.if_unlikely(builder, failed):
                context.call_conv.return_user_exc(builder, exc, (text,))
            return context.get_dummy_value()

        return types.none(cond, message), codegen

    return raise_if


# the exceptions generated checks raise -> the intrinsic raising each
RAISE_IF = {exc.__name__: _raise_if(exc)
            for exc in (ValueError, IndexError, MemoryError, OverflowError, RuntimeBroadcast)}


def zero_d(value: str) -> str:
    """Source of a new 0-d array holding the scalar expression `value`."""
    return f"np.full((1,), {value})[0:1].reshape(())"


def empty_expr(src, shape_expr: str, dtype: str) -> str:
    """The expression allocating an array of `shape_expr` and `dtype` in the generated code
    of ProgramSource `src`."""
    if _empty_nd_impl is None:  # pragma: no cover
        return f"np.empty({shape_expr}, {np_dtype(dtype)})"
    return f"{src.add_global('empty', empty_c)}({shape_expr}, {np_dtype(dtype)})"


@intrinsic
def ws_take(typingctx, ws, offset, shape, dtype):
    """(array, end): a C-contiguous array of `shape` and `dtype` carved from the byte array `ws`
    at `offset`, and the offset after it (rounded up to WORKSPACE_ALIGN); where it does not fit
    in `ws` (or its size overflows), a new array instead (see empty_c), while `end` still
    counts it, so the final offset is the workspace a call needs (see storage.Storage)."""
    found = _item_and_dims(dtype, shape)
    if found is None or not (isinstance(ws, types.Array) and ws.ndim == 1 and ws.layout == "C"
                             and ws.dtype == types.uint8 and isinstance(offset, types.Integer)):
        return None
    item, dim_types = found
    ret = types.Array(item, len(dim_types), "C")
    sig = types.Tuple((ret, types.intp))(ws, offset, shape, dtype)

    def codegen(context, builder, sig, args):
        dims = _parse_shape(context, builder, sig.args[2], args[2])  # (negative dims raise)
        start = context.cast(builder, args[1], sig.args[1], types.intp)
        end, bad = _end_of(context, builder, start, item, dims)
        capacity = builder.extract_value(context.make_array(ws)(context, builder, args[0]).shape,
                                         0)
        fits = builder.and_(builder.not_(bad), builder.icmp_signed("<=", end, capacity))
        slot = cgutils.alloca_once(builder, context.get_value_type(ret))
        with builder.if_else(fits, likely=True) as (carve, allocate):
            with carve:
                builder.store(_carve(context, builder, ws, args[0], ret, start, dims), slot)
            with allocate:
                array = _empty_nd_impl(context, builder, ret, dims)
                if sys.platform.startswith("linux"):
                    _ask_for_huge_pages(context, builder, array, item, dims)
                builder.store(array._getvalue(), slot)
        return context.make_tuple(builder, sig.return_type, [builder.load(slot), end])

    return sig, codegen


# a workspace size no call can have: what ws_add saturates to on overflow or a negative dim
WORKSPACE_TOO_BIG = 1 << 62


@intrinsic
def ws_add(typingctx, total, shape, dtype):
    """`total` plus the bytes of an array of `shape` and `dtype` rounded up to WORKSPACE_ALIGN;
    WORKSPACE_TOO_BIG where the size overflows, a dim is negative or `total` is already it."""
    found = _item_and_dims(dtype, shape)
    if found is None or not isinstance(total, types.Integer):
        return None
    item, dim_types = found

    def codegen(context, builder, sig, args):
        intp = context.get_value_type(types.intp)
        start = context.cast(builder, args[0], sig.args[0], types.intp)
        end, bad = _end_of(context, builder, start, item,
                           _dims(context, builder, shape, args[1], dim_types))
        # (start below 2**62 too: the sum cannot overflow)
        bad = builder.or_(bad, builder.icmp_unsigned(">=", start, intp(WORKSPACE_TOO_BIG)))
        return builder.select(bad, intp(WORKSPACE_TOO_BIG), end)

    return types.intp(total, shape, dtype), codegen


@intrinsic
def ws_reserve(typingctx, ws, need):
    """`ws` if it holds `need` bytes, else a new workspace of `need` bytes (ValueError when
    ws_add saturated: a temporary too large for any machine)."""
    if not (isinstance(ws, types.Array) and isinstance(need, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        intp = context.get_value_type(types.intp)
        need_val = context.cast(builder, args[1], sig.args[1], types.intp)
        with cgutils.if_unlikely(builder, builder.icmp_unsigned(">=", need_val,
                                                                intp(WORKSPACE_TOO_BIG))):
            context.call_conv.return_user_exc(
                builder, ValueError, ("a program's temporary has a negative or too large "
                                      "size",))
        capacity = builder.extract_value(context.make_array(ws)(context, builder, args[0]).shape,
                                         0)
        slot = cgutils.alloca_once_value(builder, args[0])
        with builder.if_else(builder.icmp_signed(">", need_val, capacity), likely=False) \
                as (grow, keep):
            with grow:  # (a new reference)
                builder.store(_empty_nd_impl(context, builder, ws, [need_val])._getvalue(), slot)
            with keep:
                context.nrt.incref(builder, ws, args[0])
        return builder.load(slot)

    return ws(ws, need), codegen


@intrinsic
def ws_carve(typingctx, ws, offset, shape, dtype):
    """The C-contiguous array of `shape` and `dtype` at byte `offset` of workspace `ws`; the
    caller guarantees it lies inside (the function's top reserved every such array's bytes
    with ws_add and ws_reserve, see storage.Storage). It holds `ws` alive."""
    found = _item_and_dims(dtype, shape)
    if found is None or not isinstance(ws, types.Array):
        return None
    item, dim_types = found
    ret = types.Array(item, len(dim_types), "C")

    def codegen(context, builder, sig, args):
        dims = _dims(context, builder, shape, args[2], dim_types)
        start = context.cast(builder, args[1], sig.args[1], types.intp)
        return _carve(context, builder, ws, args[0], ret, start, dims)

    return ret(ws, offset, shape, dtype), codegen


def preferred_vector_width() -> int | None:
    """The vector width (bits) LLVM should prefer in the programs compiled now, None for LLVM's
    own choice: `config.vector_width` (VERGLAS_VECTOR_WIDTH), else this machine's."""
    width = config.vector_width
    return _host_vector_width() if width is None else width or None


@functools.cache
def _host_vector_width() -> int | None:
    """512 where AVX-512 is there (LLVM's tuning for recent Intel server chips stays at 256:
    measured here, a float32 tanh loop runs 20-25% faster with 512), else LLVM's choice."""
    try:
        return 512 if "+avx512f" in ll.get_host_cpu_features().flatten().split(",") else None
    except RuntimeError:  # pragma: no cover - no host feature query
        return None


@intrinsic
def prefer_wide_vectors(typingctx):
    """Ask LLVM to vectorize the calling function's loops at preferred_vector_width() (called
    at the top of every generated function; nothing where no width is preferred). The attribute
    is set on the caller: an intrinsic's code is lowered into it, when the function compiles."""

    def codegen(context, builder, sig, args):
        width = preferred_vector_width()
        if width:
            # (llvmlite checks attribute names against a fixed list without string ones)
            set.add(builder.function.attributes, f'"prefer-vector-width"="{width}"')
        return context.get_dummy_value()

    return types.none(), codegen

