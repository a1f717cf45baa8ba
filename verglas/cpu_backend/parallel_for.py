"""Loops over rows on numba's thread pool without numba's `parallel=True` machinery.

`prange` makes numba outline the loop into a gufunc and compile it through a second pipeline:
measured here, ~0.8 s of cold compile per program (softmax 0.6 -> 1.4 s). `parallel_range`
takes a jitted row function `body(lo, hi, *args)` instead, compiled like any other callee, and
hands the pool (numba's threading-layer entry point `numba_parallel_for`, the one prange uses)
a small callback that calls it on each chunk of rows. Small loops run on the calling thread.
"""

from __future__ import annotations

import ast
import builtins
import itertools

from llvmlite import ir
from numba.core import cgutils, types
from numba.core.extending import intrinsic

from verglas.cpu_backend.callees import call_status, callee_signature, declare_unlinked

__all__ = ["parallel_range", "call_on_pool", "pool_lines_since", "launch", "SERIAL_WORK",
           "CHUNKS_PER_THREAD"]

# loops doing less work than this (rows x columns) run on the calling thread: handing chunks
# to the pool costs microseconds
SERIAL_WORK = 1 << 15
# chunks of rows per pool thread: a few, so a thread that finishes early takes another
CHUNKS_PER_THREAD = 4

_names = itertools.count()


def launch() -> None:
    """Start numba's thread pool and register its entry points with LLVM (needed before a
    program calling parallel_range is compiled or loaded from the cache)."""
    # (numba picks and starts its threading layer here, after threads.py has loaded TBB)
    from numba.np.ufunc.parallel import _launch_threads

    _launch_threads()


@intrinsic
def parallel_range(typingctx, body, n, work, args):
    """body(lo, hi, *args) over chunks of range(n): on the pool when `work` is large.

    `args` is a tuple (arrays, scalars) every chunk gets as it is: the body must write disjoint
    rows. After a chunk fails, the whole loop runs again on the calling thread and raises its
    error (MemoryError if it then succeeds)."""
    if not isinstance(body, types.Dispatcher) or not isinstance(args, types.BaseTuple):
        return None
    body_sig = callee_signature(typingctx, body, (types.intp, types.intp, *args.types))
    if body_sig is None:
        return None
    sig = types.void(body, n, work, args)

    def codegen(context, builder, sig, llargs):
        _, n_val, work_val, args_val = llargs
        launch()
        fn = declare_unlinked(context, builder, body.dispatcher, body_sig)  # (callees.py)
        intp = context.get_value_type(types.intp)
        n_val = context.cast(builder, n_val, sig.args[1], types.intp)
        work_val = context.cast(builder, work_val, sig.args[2], types.intp)

        def call(b, lo, hi, values):
            values = [context.cast(b, v, actual, wanted) for v, actual, wanted
                      in zip(values, args.types, body_sig.args[2:])]
            return call_status(context, b, fn, body_sig, [lo, hi, *values])

        # (one row: nothing to share)
        small = builder.or_(builder.icmp_signed("<", work_val, intp(SERIAL_WORK)),
                            builder.icmp_signed("<", n_val, intp(2)))
        with builder.if_else(small) as (serial, pooled):
            with serial:
                items = [builder.extract_value(args_val, k) for k in range(len(args))]
                status, _ = call(builder, intp(0), n_val, items)
                with cgutils.if_unlikely(builder, status.is_error):
                    context.call_conv.return_status_propagate(builder, status)
            with pooled:
                _run_on_pool(context, builder, call, n_val, args_val, intp)
        return context.get_dummy_value()

    return sig, codegen


def _run_on_pool(context, builder, call, n_val, args_val, intp) -> None:
    """Hand the pool CHUNKS_PER_THREAD chunks per thread (or n, if fewer), each a run of rows:
    numba's TBB layer splits what it is given down to single units (a loop over 1M elements
    handed over as 1M units ran as ~690k calls of the body, 15 ms for 0.45 ms of work)."""
    module = builder.module
    byte_ptr = ir.IntType(8).as_pointer()
    # arguments, failure flag, rows, chunks
    record_ty = ir.LiteralStructType([args_val.type, ir.IntType(8), intp, intp])
    callback = ir.Function(module, ir.FunctionType(
        ir.VoidType(), [byte_ptr.as_pointer(), intp.as_pointer(), intp.as_pointer(), byte_ptr]),
        name=f"verglas_rows_chunk_{next(_names)}")
    callback.linkage = "internal"
    cb = ir.IRBuilder(callback.append_basic_block())
    chunk_args, dims, _, data = callback.args
    first = cb.ptrtoint(cb.load(chunk_args), intp)  # the pool offsets a null base by lo * 1
    last = cb.add(first, cb.load(dims))
    record = cb.bitcast(data, record_ty.as_pointer())
    rows = cb.load(cgutils.gep_inbounds(cb, record, 0, 2))
    chunks = cb.load(cgutils.gep_inbounds(cb, record, 0, 3))
    # chunks [first, last) are rows [rows * first // chunks, rows * last // chunks)
    lo = cb.sdiv(cb.mul(rows, first), chunks)
    hi = cb.sdiv(cb.mul(rows, last), chunks)
    values = cb.load(cgutils.gep_inbounds(cb, record, 0, 0))
    status, _ = call(cb, lo, hi, [cb.extract_value(values, k)
                                  for k in range(len(args_val.type.elements))])
    with cgutils.if_unlikely(cb, status.is_error):
        cb.store(ir.IntType(8)(1), cgutils.gep_inbounds(cb, record, 0, 1))
    cb.ret_void()

    record = cgutils.alloca_once(builder, record_ty)
    builder.store(args_val, cgutils.gep_inbounds(builder, record, 0, 0))
    flag = cgutils.gep_inbounds(builder, record, 0, 1)
    builder.store(ir.IntType(8)(0), flag)
    get_num_threads = cgutils.get_or_insert_function(
        module, ir.FunctionType(intp, []), "get_num_threads")
    threads = builder.call(get_num_threads, [])
    most = builder.mul(threads, intp(CHUNKS_PER_THREAD))
    chunks = builder.select(builder.icmp_signed("<", n_val, most), n_val, most)
    builder.store(n_val, cgutils.gep_inbounds(builder, record, 0, 2))
    builder.store(chunks, cgutils.gep_inbounds(builder, record, 0, 3))
    base = cgutils.alloca_once_value(builder, byte_ptr(None))
    dims = cgutils.alloca_once_value(builder, chunks)
    steps = cgutils.alloca_once_value(builder, intp(1))
    parallel_for = cgutils.get_or_insert_function(
        module, ir.FunctionType(ir.VoidType(), [byte_ptr] * 5 + [intp] * 3),
        "numba_parallel_for")
    builder.call(parallel_for, [
        builder.bitcast(callback, byte_ptr), builder.bitcast(base, byte_ptr),
        builder.bitcast(dims, byte_ptr), builder.bitcast(steps, byte_ptr),
        builder.bitcast(record, byte_ptr), intp(0), intp(1), threads])
    failed = builder.icmp_unsigned("!=", builder.load(flag), ir.IntType(8)(0))
    with cgutils.if_unlikely(builder, failed):
        # the error itself stays on the pool thread: the loop runs again here to raise it
        # (an elementwise loop's, e.g. an integer power's negative exponent); its outputs
        # are being computed, nothing else reads them yet
        items = [builder.extract_value(args_val, k) for k in range(len(args_val.type.elements))]
        status, _ = call(builder, intp(0), n_val, items)
        with cgutils.if_unlikely(builder, status.is_error):
            context.call_conv.return_status_propagate(builder, status)
        context.call_conv.return_user_exc(
            builder, MemoryError, ("a loop over rows failed on a pool thread",))


_MODULE_NAMES = frozenset(dir(builtins)) | {"np", "math", "cmath", "numba", "RuntimeBroadcast"}


def call_on_pool(src, em, setup: list[str], loop: list[str], rows: str, work: str) -> None:
    """Move a generated row loop (`loop`: its lines as emitted, the header
    `for r in range(lo, hi):` first) into a function of its own, with `setup` lines (per-chunk
    scratch) before it, and emit the parallel_range call running it over `rows` rows.

    The function takes what the loop reads from the enclosing one (found by parsing it)."""
    indent = len(loop[0]) - len(loop[0].lstrip())
    lines = [line for line in setup] + [line[indent:] for line in loop]
    tree = ast.parse("\n".join(lines))
    stored, loaded = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Store):
                stored.add(node.id)
            elif node.id not in loaded:
                loaded.append(node.id)
    outside = _MODULE_NAMES | set(src.globals) | set(src.jit_names) | {"lo", "hi"}
    params = sorted((name for name in loaded if name not in stored and name not in outside),
                    key=lambda name: (len(name), name))
    name = em.fresh("rows")
    src.functions.append("\n".join([f"def {name}(lo, hi, {', '.join(params)}):"]
                                   + ["    " + line for line in lines] + ["    return"]))
    src.jit_names.append(name)
    src.root.parallel = True
    call = src.add_global("parallel_range", parallel_range)
    em.line(f"{call}({name}, {rows}, {work}, ({''.join(p + ', ' for p in params)}))")


def pool_lines_since(ctx, start: int, rows: str, size: str, work: int, setup=()) -> None:
    """Move the row loop `ctx` emitted since line `start` to the pool (call_on_pool): `rows`
    rows, `size` elements of `work` eighths of a work unit each (schedule/pools.py)."""
    loop = ctx.em.lines[start:]
    del ctx.em.lines[start:]
    call_on_pool(ctx.src, ctx.em, list(setup), loop, rows, f"{size} * {work} // 8")
