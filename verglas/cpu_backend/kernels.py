"""CPU kernels: per op class, the code a step contributes to the program function.

`emit(op, ctx)` is a singledispatch function; each registered emitter writes numba-compatible
lines through the StepContext (see codegen.py). Scalar code for Elemwise (and the scalar graphs
of Composite) is built by `scalar_expr`, which calls each scalar op's single `impl`, or the
vectorizable version from vmath where one exists.
"""

from __future__ import annotations

import cmath
import functools
import math
import re

import numba
import numpy as np

from verglas.cpu_backend.broadcast_copy import broadcast_into, emit_broadcast_copy
from verglas.cpu_backend.dtypes import cast_expr, half_round, storage_dtype
from verglas.cpu_backend.dtypes import literal as source_literal
from verglas.cpu_backend.intrinsics import (RAISE_IF, RuntimeBroadcast, broadcast_length,
                                            c_contiguous, c_head, c_row, c_view, empty_c,
                                            empty_expr, float_to_int, own_row, permuted,
                                            prefer_wide_vectors,
                                            reshape_lengths, reshaped, scalars_at, select,
                                            ws_add, ws_carve, ws_reserve, ws_take)
from verglas.cpu_backend.vmath import FASTMATH, VMATH
from verglas.cpu_backend.loop_chunks import call_kernel, chunk_views, share_loop
from verglas.cpu_backend.threads import parallel_rows
from verglas.cpu_backend.tiles import open_tiles
from verglas.ops import scalar as s
from verglas.ops.elemwise import Elemwise
from verglas.cpu_backend.vmath_ops import smul
from verglas.scalar_code import (HELPERS, ElementBlock, TermLoops, emit_scalar, helpers_in,
                                 substitute, variant)
from verglas.scalar_code import arith as scalar_arith
from verglas import source
from verglas.source import all_of

__all__ = ["RuntimeBroadcast", "EmitContext", "KernelContext", "emit", "scalar_impl", "literal",
           "register_helper", "helper_ref", "resolve_helper", "HELPER_REFS"]

HELPER_REFS: dict = {}  # name -> module-level jitted helper used by generated code
_SCALAR_REFS: dict = {}  # id(jitted scalar impl) -> ("scalar", op name, dtype)


# intrinsics generated code calls, found again by name
HELPER_REFS.update(scalars_at=scalars_at, c_view=c_view, c_contiguous=c_contiguous, c_row=c_row,
                   c_head=c_head, own_row=own_row,
                   permuted=permuted,
                   empty_c=empty_c, ws_take=ws_take, ws_add=ws_add, ws_reserve=ws_reserve,
                   ws_carve=ws_carve,
                   prefer_wide_vectors=prefer_wide_vectors, half_round=half_round,
                   float_to_int=float_to_int, select=select, reshape_lengths=reshape_lengths,
                   broadcast_length=broadcast_length, broadcast_into=broadcast_into,
                   **{f"raise_if_{name}": fn for name, fn in RAISE_IF.items()})


def register_helper(fn):
    """Record a module-level jitted helper so cached programs can find it again by name."""
    HELPER_REFS[fn.py_func.__name__] = fn
    return fn


def helper_ref(fn):
    """The importable reference of a jitted scalar implementation, or None."""
    return _SCALAR_REFS.get(id(fn))


def resolve_helper(ref):
    """The jitted helper a reference names (see helper_ref / register_helper)."""
    if isinstance(ref, str):
        return HELPER_REFS[ref]
    return scalar_impl(*ref[1:])


@functools.singledispatch
def emit(op, ctx) -> None:
    raise NotImplementedError(f"cpu backend: no kernel for {op} ({type(op).__name__})")


# -- scalar code -----------------------------------------------------------------------------
# scalar ops whose vmath kernel is not accurate enough to replace the libm one (vmath's pow
# is exact on representable integer powers now, so none is)
_EXACT_ONLY: frozenset = frozenset()


@functools.cache
def scalar_impl(op_name: str, dtype: str | None = None):
    """The jitted scalar implementation of scalar op `op_name` (vectorizable one if any).

    Generated loops call it and LLVM inlines the call and vectorizes the loop as if the body
    were written there (measured: tanh/exp/sin/log/sigmoid, float32 and float64, within 10% of
    the IR-inlined run time). numba's own inlining (inline="always") would copy the function's
    IR into every call site instead: its passes grow superlinearly with function size (29
    inlined sin in one loop took 8 s to compile) and prange loops pay for it twice (softmax's
    parallel compile 1.0-1.5 s inlined, 0.9 s called)."""
    # only ever called from generated code: no Python or C entry points to build
    options = {"error_model": "numpy", "no_cpython_wrapper": True, "no_cfunc_wrapper": True}
    fn = None
    if dtype is not None and op_name not in _EXACT_ONLY:
        fast = VMATH.get((op_name, dtype))
        if fast is not None:
            fn = numba.njit(fastmath=set(FASTMATH), **options)(fast.py_func)
    if fn is None:
        fn = numba.njit(**options)(s.SCALAR_OPS[op_name].impl)
    _SCALAR_REFS[id(fn)] = ("scalar", op_name, dtype)
    return fn


def literal(value, dtype: str, ctx=None) -> str:
    """A typed scalar constant in generated code: a frozen global when `ctx` is given (one IR
    load instead of a constructor call), else a constructor expression."""
    if ctx is not None and dtype != "bool":
        value = np.asarray(value).astype(dtype)  # (a float16 value: the float32 holding it)
        return ctx.src.constant(np.dtype(storage_dtype(dtype)).type(value.item()))
    return source_literal(value, dtype)


# numba gives these the input float type when every input has the output's float dtype, so no
# cast is needed (a cast still costs numba IR statements, which is what compile time scales with)
_TYPE_PRESERVING = frozenset({"add", "sub", "mul", "true_div", "neg", "sqr", "identity", "abs",
                              "second", "switch"})
_BOOL_RESULT = frozenset({"lt", "le", "gt", "ge", "eq", "neq", "isnan", "isinf"})


# float arguments: numba's numpy functions where they beat the shared scalar code (np.floor
# keeps -0.0 and maps to a vector instruction); isinf without the `or` numba makes blocks of
FLOAT_IMPL = {"floor": "np.floor(x)", "ceil": "np.ceil(x)", "isinf": "(abs(x) == math.inf)"}


def _compile_helpers() -> None:
    """The shared scalar helpers (verglas.scalar_code.HELPERS), jitted and registered by name
    so cached programs find them again."""
    namespace = {"math": math, "cmath": cmath, "np": np}
    for name, text in HELPERS.items():
        exec(text, namespace)
    namespace["strict_mul"] = HELPER_REFS["strict_mul"] = smul  # flagged 'afn': never stamped
    for name in HELPERS:
        if name == "strict_mul":
            continue
        namespace[name] = HELPER_REFS[name] = numba.njit(
            cache=False, error_model="numpy", no_cpython_wrapper=True,
            no_cfunc_wrapper=True)(namespace[name])


_compile_helpers()


def arith(ctx, op: str, a: str, b: str, dtype: str) -> str:
    """The expression `a op b` (op "+" or "*") computed in `dtype` with numpy's wraparound
    (both sides already of `dtype`; the result converted to it)."""
    expr = scalar_arith(op, a, b, dtype)
    return expr if np.dtype(dtype).kind != "i" else cast_expr(expr, dtype)


def _with_helpers(ctx, expr: str) -> str:
    """`expr` with the shared helpers it calls registered with the generated code."""
    for name in helpers_in(expr):
        expr = re.sub(rf"\b{name}\b", ctx.helper(name, HELPER_REFS[name]), expr)
    return expr


def _vmath(op_name: str, dtype: str):
    if op_name in _EXACT_ONLY or np.dtype(dtype).kind != "f":
        return None
    return VMATH.get((op_name, dtype))


def scalar_expr(ctx, sop, args: list[str], arg_dtypes: list[str], out_dtypes,
                loops=None) -> list[str]:
    """Emit the scalar computation of `sop` on expressions `args`; return result names
    (runs of like terms as loops, with `loops`: see term_loops)."""
    return emit_scalar(sop, args, arg_dtypes, out_dtypes,
                       literal=lambda value, dtype: literal(value, dtype, ctx),
                       cast=lambda expr, dtype: cast_expr(expr, dtype, ctx.src),
                       write_op=lambda *a: _write_op(ctx, *a), loops=loops)


def term_loops(ctx, elements: dict) -> TermLoops:
    """The TermLoops of a step's scalar code: `elements` (input position -> (array, offset,
    m)) says which inputs are array elements; varying constants become global arrays."""
    def constants(dtype, values):
        return ctx.helper("rk", np.array(values, dtype=storage_dtype(dtype)))
    return TermLoops(ctx, elements, constants)


def _write_op(ctx, sop, args: list[str], arg_dtypes: list[str], out_dtype: str) -> str:
    """Emit one (non-Composite) scalar op on arguments of its loop's dtypes; its name."""
    name = ctx.fresh("t")
    exact_type = False  # whether numba's result type is out_dtype without a cast
    complex_args = any(np.dtype(d).kind == "c" for d in arg_dtypes)
    if isinstance(sop, s.Cast):
        expr = args[0]
        exact_type = arg_dtypes[0] == out_dtype or (
            arg_dtypes[0] == "float16" and out_dtype == "float32")  # (held as float32)
        if complex_args and np.dtype(out_dtype).kind not in "cb":
            expr = f"({expr}).real"  # numpy keeps the real part (with a ComplexWarning)
        if np.dtype(arg_dtypes[0]).kind in "fc" and np.dtype(out_dtype).kind in "iu":
            # through int64 (uint64) bits, defined for NaN and out-of-range values; narrower
            # integers keep the low bits, as numpy's conversion does on this machine
            fn = ctx.helper("float_to_int", float_to_int)
            expr = f"{fn}({expr}, {out_dtype != 'uint64'})"
            exact_type = out_dtype in ("int64", "uint64")
    elif isinstance(sop, s.Switch):  # (a conditional expression: blocks numba compiles)
        expr = f"{ctx.helper('select', select)}({', '.join(args)})"
    elif isinstance(sop, (s.Neg, s.Invert)) and arg_dtypes[0] == "bool":
        expr = f"not {args[0]}"
        exact_type = True
    elif _vmath(sop.name, out_dtype) is not None:
        fn = ctx.helper(f"f_{sop.name}_", scalar_impl(sop.name, out_dtype))
        # the kernel is typed for its float dtype: an integer argument converts first
        typed = [a if d == out_dtype else cast_expr(a, out_dtype)
                 for a, d in zip(args, arg_dtypes)]
        expr = f"{fn}({', '.join(typed)})"
        exact_type = True
    elif (special := variant(sop, arg_dtypes)) is not None:
        expr = _with_helpers(ctx, substitute(special, args))
    elif sop.name in FLOAT_IMPL and np.dtype(arg_dtypes[0]).kind == "f":
        expr = substitute(FLOAT_IMPL[sop.name], args)
    elif sop.impl_expr is not None:
        expr = substitute(sop.impl_expr, args)
        # (float16 values are float32 in generated code: every result is rounded)
        floats_alike = np.dtype(out_dtype).kind == "f" and out_dtype != "float16" and all(
            d == out_dtype for d in arg_dtypes)
        exact_type = (sop.name in _TYPE_PRESERVING and floats_alike) or (
            sop.name in _BOOL_RESULT and out_dtype == "bool")
    else:
        fn = ctx.helper(f"f_{sop.name}_", scalar_impl(sop.name, None))
        expr = f"{fn}({', '.join(args)})"
    ctx.line(f"{name} = {expr if exact_type else cast_expr(expr, out_dtype, ctx.src)}")
    return name


# -- Elemwise --------------------------------------------------------------------------------


def _uniform(data: np.ndarray) -> bool:
    """Whether every element of a constant is the same value (bit for bit)."""
    if data.size == 0:
        return False
    flat = data.reshape(-1)
    return data.size == 1 or bool(np.all(flat.view(np.uint8).reshape(flat.size, -1)
                                         == flat[:1].view(np.uint8)))


@emit.register(Elemwise)
def _emit_elemwise(op, ctx) -> None:
    node = ctx.node
    arrays = []  # (input position, name) of inputs read as arrays
    # position -> ("const", 0-d value) for one-element constants, ("read", expression) for the
    # other one-element inputs (read once, before the loops)
    sources = {}
    for i, var in enumerate(node.inputs):
        data = ctx.constant_value(i)
        if data is not None and _uniform(data):
            # one value (broadcast): a literal, not a frozen array LLVM reads element by
            # element (it then mistook maximum(0.0, -0.0) for 0.0 in vectorized loops)
            sources[i] = ("const", data.reshape(-1)[:1].reshape(()))
        elif ctx.scalar(i) is not None:  # a known one-element buffer
            sources[i] = ("read", ctx.scalar(i))
        elif all(d == 1 for d in var.type.shape):
            name = ctx.inp(i)
            sources[i] = ("read", f"{name}[{', '.join('0' * var.ndim) if var.ndim else '()'}]")
        else:
            arrays.append((i, ctx.inp(i)))
    modes = _broadcast_modes(ctx, arrays)
    proven = all(m != "unknown" for mode in modes.values() for m in mode)
    dims = None
    if not proven and ctx.src.specialized:  # checked here, then known like the proven
        dims, modes = _check_specialized(op, ctx, arrays, modes)
        proven = True
    if proven and (op in ctx.src.shared_ops or (getattr(ctx.src, "large", False)
                                                and node.outputs[0].ndim >= 1)) and all(
            i in {i for i, _ in arrays} for _, i in op.inplace_pattern):
        _emit_elemwise_shared(op, ctx, arrays, sources, modes)
        return
    scalars = {}  # position -> scalar expression
    groups = _scalar_groups(ctx, sources)
    elements = {}  # position -> (array, offset, m): element offset + m of array
    for group in groups:
        loc = ctx.element_of(group[0])
        if len(group) > 1 and loc is not None:
            offset = ctx.src.offset(loc[1])
            elements.update((i, (loc[0], offset, m)) for m, i in enumerate(group))
    loops, looped = _term_loops(ctx, op, elements) if proven else (None, set())
    for group in groups:
        loc = ctx.element_of(group[0])
        if len(group) > 1 and loc is not None and looped.issuperset(group):
            # read term by term, inside the loops of like terms
            scalars.update((i, "{}[{} + {}]".format(*elements[i])) for i in group)
            continue
        if len(group) > 1 and loc is not None:  # a run of one array's elements: one statement
            hs = [ctx.fresh("h") for _ in group]
            fn = ctx.helper("scalars_at", scalars_at)
            ctx.line(f"{', '.join(hs)} = {fn}({loc[0]}, {ctx.src.offset(loc[1])}, "
                     f"{len(group)})")
            scalars.update(zip(group, hs))
            continue
        for i in group:
            kind, value = sources[i]
            if kind == "const":
                scalars[i] = literal(value, node.inputs[i].type.dtype, ctx)
            else:
                scalars[i] = ctx.fresh("h")
                ctx.line(f"{scalars[i]} = {value}")
    if proven:
        _emit_elemwise_proven(op, ctx, arrays, scalars, modes, dims, loops)
    else:
        _emit_elemwise_generic(op, ctx, arrays, scalars)


def _term_loops(ctx, op, elements) -> tuple[TermLoops | None, set]:
    """(the TermLoops of `op`'s Composite, the input positions only they read)."""
    inner = getattr(op.scalar_op, "fgraph", None)
    if inner is None:
        return None, set()
    loops = term_loops(ctx, elements)
    return loops, loops.inputs_only_looped(inner)


class EmitContext(source.EmitContext):
    """A CPU step emitter's context: lines, and globals added to the module (`self.src`)."""

    def helper(self, prefix: str, fn) -> str:
        return self.src.add_global(prefix, fn)

    def contiguous(self, array: str) -> str:
        """The expression of `array` as a C-contiguous array (itself where it is one)."""
        return f"{self.helper('c_contiguous', c_contiguous)}({array})"

    def fail_if(self, condition: str, exc: str, message: str) -> None:
        """Raise `exc(message)` where the boolean expression `condition` holds (evaluated
        whole, no short circuit: join several with source.any_of). One call of a raising
        intrinsic, not an `if` and a `raise`: numba's passes cost per block of a program
        function (intrinsics.RAISE_IF)."""
        fn = self.helper(f"raise_if_{exc}", RAISE_IF[exc])
        self.line(f"{fn}({condition}, {message!r})")

    def keeps_scalars(self) -> bool:
        """Whether 0-d elementwise results stay scalar locals rather than arrays."""
        return False

    def reads_across(self, i: int) -> bool:
        """Whether input `i` is a view read a row of storage apart per step (codegen's)."""
        return False

    def pool_work(self) -> int | None:
        """Eighths of a work unit per element when the thread pool shares out this step's
        loop (the scheduler's decision, schedule/pools.py, where a safe pool is there)."""
        return self.program.pool_work(self.step.index) if parallel_rows() else None


class KernelContext(EmitContext):
    """A step's emitter writing the body of a shared kernel function (one per distinct op and
    argument types, called by every step using it): its input arrays are the parameters
    p<i>, its outputs o<j> (allocated by the caller) or, inplace, their input's parameter."""

    def __init__(self, src, parent, contiguous):
        self.src, self.em = src, src.emitter
        self.node, self.op, self.step = parent.node, parent.op, parent.step
        self.program = parent.program
        self._contiguous = contiguous
        self._inplace = dict(getattr(parent.op, "inplace_pattern", ()))
        self._pool_work = parent.pool_work()  # (the kernel's key holds it)
        self._across = {i: parent.reads_across(i) for i in contiguous}  # (and this)
        # how the kernel's loop is shared out (see loop_chunks.share_loop): None, or ('flat' | 'first',
        # work per element); then it takes the chunk's rows `lo, hi` first
        self.pooled = None

    def pool_work(self) -> int | None:
        return self._pool_work

    def reads_across(self, i: int) -> bool:
        return self._across[i]

    def alloc(self, j, shape_expr):
        # an inplace output is its input parameter: one pointer, so LLVM sees the aliasing
        # (two parameters for one array make its run-time alias check fail: no SIMD)
        return f"p{self._inplace[j]}" if j in self._inplace else f"o{j}"

    def inp(self, i):
        return f"p{i}"

    def is_contiguous(self, i):
        return self._contiguous[i]


def _scalar_groups(ctx, sources) -> list[tuple[int, ...]]:
    """Runs of one-element inputs (in input order, one dtype) that are all constants or
    consecutive elements of one array (see StepContext.element_of); every other input alone.

    A new shared kernel takes each run of two or more as one array parameter (decided at its
    first call site); an inline loop reads a packed run with one statement."""
    groups: list[list[int]] = []
    prev = None  # (dtype, class, next element) of the last group
    for i in sorted(sources):
        dtype = ctx.node.inputs[i].type.dtype
        kind, _ = sources[i]
        loc = ctx.element_of(i) if kind == "read" else None
        cls = "const" if kind == "const" else (loc[0] if loc is not None else None)
        nxt = loc[1] + 1 if loc is not None else None
        if cls is not None and prev is not None and prev[:2] == (dtype, cls) and (
                loc is None or loc[1] == prev[2]):
            groups[-1].append(i)
        else:
            groups.append([i])
        prev = (dtype, cls, nxt) if cls is not None else None
    return [tuple(g) for g in groups]


def _scalar_group_args(ctx, sources, group) -> list[str]:
    """The arguments passing one-element inputs `group` to a shared kernel: the scalar itself
    for a group of one, else a 1-d C-contiguous array and the offset where they lie in a row:
    a packed-input array, an input the group reads elements of, or the constant pool in the
    common cases (no statements per element: each costs numba milliseconds; so does a slice,
    hence the offset)."""
    dtype = ctx.node.inputs[group[0]].type.dtype
    if len(group) == 1:
        kind, value = sources[group[0]]
        return [literal(value, dtype, ctx) if kind == "const" else value]
    kinds = {sources[i][0] for i in group}
    if kinds == {"const"}:
        name, start = ctx.src.pool_run(dtype, [sources[i][1] for i in group])
        return [name, ctx.src.offset(start)]
    locs = [ctx.element_of(i) for i in group] if kinds == {"read"} else []
    if locs and all(loc is not None and loc[0] == locs[0][0] for loc in locs) and all(
            loc[1] == locs[0][1] + m for m, loc in enumerate(locs)):
        return [locs[0][0], ctx.src.offset(locs[0][1])]
    v = ctx.fresh("sv")  # mixed: build the array element by element
    ctx.line(f"{v} = {empty_expr(ctx.src, f'({len(group)},)', dtype)}")
    for m, i in enumerate(group):
        kind, value = sources[i]
        ctx.line(f"{v}[{m}] = {literal(value, dtype, ctx) if kind == 'const' else value}")
    return [v, ctx.src.offset(0)]




def _emit_elemwise_shared(op, ctx, arrays, sources, modes) -> None:
    """A call of one jitted kernel function per distinct (op, broadcasting, layout): an op
    used many times (see rewrite/kernel_sharing.py) is compiled once.

    Its one-element inputs travel in groups (see _scalar_groups): a call with many scalars
    then costs numba a few statements, not a few per scalar."""
    node = ctx.node
    ndim = node.outputs[0].ndim
    dims = _proven_dims(ctx, arrays, modes)
    shape = "(" + "".join(f"{d}, " for d in dims) + ")"
    outs = [ctx.alloc(j, shape) for j in range(len(node.outputs))]
    contiguous = {i: ctx.is_contiguous(i) for i, _ in arrays}
    # (the op does not say its input dtypes: one clip may take a uint16 bound here, a float64
    # one there; the scalar groups of a kernel are typed by its first call site)
    key = (op, tuple(v.type.dtype for v in node.inputs), ndim,
           tuple((i, tuple(modes[i]), contiguous[i], ctx.reads_across(i)) for i, _ in arrays),
           tuple(sorted(sources)), ctx.pool_work())
    entry = ctx.src.shared_kernels.get(key)
    if entry is None:
        name = ctx.src.emitter.fresh("kern")
        groups = _scalar_groups(ctx, sources)
        ctx.src.shared_kernels[key] = (name, groups, None)  # (the pooling is known below)
        kern = ctx.src.child(name)
        kern.emitter.reserve([f"{p}{i}" for p in "ps" for i in range(len(node.inputs))]
                             + [f"o{j}" for j in range(len(node.outputs))]
                             + [f"{p}{k}" for p in ("sv", "so") for k in range(len(groups))])
        kctx = KernelContext(kern, ctx, contiguous)
        params = [f"p{i}" for i, _ in arrays]
        elements = {i: (f"sv{k}", f"so{k}", m) for k, group in enumerate(groups)
                    if len(group) > 1 for m, i in enumerate(group)}
        loops, looped = _term_loops(kctx, op, elements)
        for k, group in enumerate(groups):
            if len(group) == 1:
                params.append(f"s{group[0]}")
                continue
            params += [f"sv{k}", f"so{k}"]
            if looped.issuperset(group):
                continue  # read term by term, inside the loops of like terms
            fn = kctx.helper("scalars_at", scalars_at)  # into locals before the loops
            names = ", ".join(f"s{i}" for i in group)
            kctx.line(f"{names} = {fn}(sv{k}, so{k}, {len(group)})")
        # the kernel serves every call site of this op: its sizes come from its output
        # argument, never from one call site's static shape
        out0 = kctx.alloc(0, None)
        kdims = [f"{out0}.shape[{a}]" for a in range(ndim)]
        scalars = {i: "{}[{} + {}]".format(*elements[i]) if i in looped else f"s{i}"
                   for i in sources}
        _emit_elemwise_proven(op, kctx, [(i, f"p{i}") for i, _ in arrays], scalars, modes,
                              kdims, loops)
        params += [f"o{j}" for j in range(len(node.outputs)) if j not in kctx._inplace]
        if kctx.pooled is not None:
            params = ["lo", "hi", *params]
        kern.emitter.line("return")
        ctx.src.functions.append("\n".join([f"def {name}({', '.join(params)}):"]
                                           + kern.emitter.lines))
        ctx.src.jit_names.append(name)
        entry = ctx.src.shared_kernels[key] = (name, groups, kctx.pooled)
    name, groups, pooled = entry
    inplace = dict(op.inplace_pattern)
    args = [n for _, n in arrays]
    for group in groups:
        args += _scalar_group_args(ctx, sources, group)
    args += [o for j, o in enumerate(outs) if j not in inplace]
    call_kernel(ctx, name, args, pooled, dims)


def _broadcast_modes(ctx, arrays) -> dict:
    """Per array input and axis: 'full' (its dim is provably the output's), 'bcast' (statically
    1 where the output is not) or 'unknown' (only known at run time)."""
    shapes = ctx.program.shapes
    out_dims = shapes.dims_of(ctx.step.outputs[0])
    out_static = ctx.node.outputs[0].type.shape
    modes = {}
    for i, _ in arrays:
        in_dims = shapes.dims_of(ctx.step.inputs[i])
        in_static = ctx.node.inputs[i].type.shape
        mode = []
        for k, (a, b) in enumerate(zip(in_dims, out_dims)):
            if a is b or (in_static[k] is not None and in_static[k] == out_static[k]):
                mode.append("full")
            elif in_static[k] == 1:
                mode.append("bcast")
            else:
                mode.append("unknown")
        modes[i] = mode
    return modes


def _input_uses(sop, n: int) -> list[int]:
    """How many times the scalar code of `sop` reads each of its `n` inputs."""
    inner = getattr(sop, "fgraph", None)
    if inner is None:
        return [1] * n
    uses = dict.fromkeys(inner.inputs, 0)
    for node in inner.toposort():
        for v in node.inputs:
            if v in uses:
                uses[v] += 1
    for v in inner.outputs:
        if v in uses:
            uses[v] += 1
    return [uses[v] for v in inner.inputs]


def _elemwise_body(ctx, op, scalars, index_of, out_index, loops=None, cast=False):
    """Assign each output's scalar expression to its `out_index` target (converted to the
    output's dtype when `cast`: a local rather than an array element)."""
    node = ctx.node
    args = [scalars[i] if i in scalars else index_of(i) for i in range(len(node.inputs))]
    block = loops.block if loops is not None else None
    for i, n in enumerate(_input_uses(op.scalar_op, len(args))):
        if n > 1 and i not in scalars:  # read an element once: each read costs numba ~4 ms
            x = ctx.fresh("x")
            ctx.line(f"{x} = {args[i]}")
            if block is not None and args[i] in block.stable:
                block.stable[x] = args[i]  # (a later loop over the elements reads it again)
            args[i] = x
    results = scalar_expr(ctx, op.scalar_op, args, [v.type.dtype for v in node.inputs],
                          [o.type.dtype for o in node.outputs], loops)
    for res, target, out in zip(results, out_index, node.outputs):
        ctx.line(f"{target} = {cast_expr(res, out.type.dtype, ctx.src) if cast else res}")


def _proven_dims(ctx, arrays, modes) -> list[str]:
    """The output's dims as expressions: static ones, else an input's provably equal dim."""
    out_static = ctx.node.outputs[0].type.shape
    dims = []
    for axis, static in enumerate(out_static):
        if static is not None:
            dims.append(str(static))
        else:
            src = next((name for i, name in arrays if modes[i][axis] == "full"), None)
            if src is not None:
                dims.append(f"{src}.shape[{axis}]")
                continue
            # no array input spans the axis: the one-element inputs and constants say it
            fixed = {v.type.shape[axis] for v in ctx.node.inputs} - {None, 1}
            dims.append(str(fixed.pop()) if fixed else "1")
    return dims


def broadcast_dim(ctx, candidates: list[str], message: str) -> str:
    """Emit numpy's broadcasting of run-time lengths `candidates` (ValueError with `message`
    when they cannot broadcast); return the name of the result."""
    d = ctx.fresh("d")
    ctx.line(f"{d} = {candidates[0] if candidates else '1'}")
    if len(candidates) > 1:
        bdim = ctx.helper("bdim", broadcast_length)
        for c in candidates[1:]:
            ctx.line(f"{d} = {bdim}({d}, {c})")
        ctx.fail_if(f"{d} < 0", "ValueError", message)
    return d


def _emit_elemwise_proven(op, ctx, arrays, scalars, modes, dims=None, loops=None) -> None:
    """All broadcasting is known (statically, or after run-time checks): direct indexing."""
    node = ctx.node
    ndim = node.outputs[0].ndim
    names = dict(arrays)
    if dims is None:
        dims = _proven_dims(ctx, arrays, modes)
    shape = "(" + "".join(f"{d}, " for d in dims) + ")"
    if ndim == 0 and ctx.keeps_scalars():  # (a loop body: no array per step)
        values = [ctx.fresh("e") for _ in node.outputs]
        _elemwise_body(ctx, op, scalars, lambda i: f"{names[i]}[()]", values, loops,
                       cast=True)
        for j, value in enumerate(values):
            ctx.set_scalar(j, value)
        return
    outs = [ctx.alloc(j, shape) for j in range(len(node.outputs))]
    if ndim == 0:
        _elemwise_body(ctx, op, scalars, lambda i: f"{names[i]}[()]",
                       [f"{o}[()]" for o in outs], loops)
        return
    work = ctx.pool_work()  # large loops run on the thread pool (the scheduler's pools.py)
    pooled = work is not None
    flat = all(m == "full" for mode in modes.values() for m in mode) and all(
        ctx.is_contiguous(i) or names[i] != ctx.inp(i) for i, _ in arrays)
    if flat:
        size = ctx.fresh("n")
        ctx.line(f"{size} = {' * '.join(dims)}")
        views = {}  # array name -> its 1-d view

        def flat_view(name, prefix):
            if ndim == 1:
                return name
            if name not in views:
                views[name] = ctx.fresh(prefix)
                ctx.line(f"{views[name]} = {reshaped(ctx, name, size)}")
            return views[name]

        flats = {i: flat_view(name, "f") for i, name in arrays}
        same = _inplace_inputs(ctx, arrays)
        oflat = [flats[same[j]] if j in same else flat_view(o, "fo") for j, o in enumerate(outs)]
        idx, count = ctx.fresh("i"), size
        if pooled:  # each chunk over views of its elements (loop_chunks.py)
            chunk, setup = chunk_views(ctx, [*flats.values(), *oflat])
            flats, oflat = {i: chunk[f] for i, f in flats.items()}, [chunk[fo] for fo in oflat]
            count = "hi - lo"
        start = len(ctx.em.lines)
        if loops is not None and loops.plan(op.scalar_op.fgraph):
            _emit_blocked(ctx, op, scalars, flats, oflat, count, idx, loops)
        else:
            ctx.line(f"for {idx} in range({count}):")
            with ctx.indent():
                _elemwise_body(ctx, op, scalars, lambda i: f"{flats[i]}[{idx}]",
                               [f"{fo}[{idx}]" for fo in oflat], loops)
        if pooled:
            share_loop(ctx, start, size, size, setup, work, "flat",
                       isinstance(ctx, KernelContext))
        return
    loop_vars = [ctx.fresh("i") for _ in range(ndim)]
    setup, rows, size = [], dims[0], " * ".join(dims)
    if pooled:  # chunks of the first axis
        same = _inplace_inputs(ctx, arrays)
        outs = [names[same[j]] if j in same else o for j, o in enumerate(outs)]
        chunk, setup = chunk_views(ctx, [*outs, *(name for i, name in arrays
                                                  if modes[i][0] == "full")])
        names = {i: chunk.get(name, name) for i, name in names.items()}
        outs, dims = [chunk[o] for o in outs], ["hi - lo", *dims[1:]]
    start, depth = len(ctx.em.lines), ctx.em.depth
    if ndim >= 2 and any(ctx.reads_across(i) for i, _ in arrays):
        names, outs, modes, loop_vars = open_tiles(ctx, names, outs, modes, dims, loop_vars)
    else:
        for axis, var in enumerate(loop_vars):
            ctx.line(f"for {var} in range({dims[axis]}):")
            ctx.em.depth += 1

    def index_of(i):
        idx = ", ".join(v if m == "full" else "0" for v, m in zip(loop_vars, modes[i]))
        return f"{names[i]}[{idx}]"

    out_idx = "[" + ", ".join(loop_vars) + "]"
    _elemwise_body(ctx, op, scalars, index_of, [f"{o}{out_idx}" for o in outs], loops)
    ctx.em.depth = depth
    if pooled:
        share_loop(ctx, start, rows, size, setup, work, "first", isinstance(ctx, KernelContext))


def _inplace_inputs(ctx, arrays) -> dict[int, int]:
    """{output: the input position whose array it overwrites, read as that very name}: the
    loop writes through the input's name, one pointer, so LLVM vectorizes `a[i] = f(a[i])`
    (two names of one array read as may-alias: a scalar loop, tanh 10 ns per element
    measured)."""
    taken = {ctx.program.buffers[b].takes_over: j for j, b in enumerate(ctx.step.outputs)}
    return {taken[ctx.step.inputs[i]]: i for i, name in arrays
            if ctx.step.inputs[i] in taken and name == ctx.inp(i)}


def _emit_blocked(ctx, op, scalars, flats, oflat, size, idx, loops) -> None:
    """The loop over the elements in blocks (scalar_code.ElementBlock), so that the term runs
    loop over their terms outside loops over a block's elements: those loops vectorize, as
    the terms written out did."""
    mark, depth = len(ctx.em.lines), ctx.em.depth

    def allocate(name, dtype):
        nonlocal mark
        shape = f"({ElementBlock.SIZE},)"
        ctx.em.lines.insert(mark, "    " * depth + f"{name} = {empty_expr(ctx.src, shape, dtype)}")
        mark += 1

    stable = {e: e for e in (*scalars.values(), *(f"{f}[{idx}]" for f in flats.values()))}
    loops.block = block = ElementBlock(ctx.em, size, idx, allocate, stable)
    block.open_blocks()
    with ctx.indent():
        block.open_elements()
        _elemwise_body(ctx, op, scalars, lambda i: f"{flats[i]}[{idx}]",
                       [f"{fo}[{idx}]" for fo in oflat], loops)
        block.close_elements()
    loops.block = None


def _emit_elemwise_generic(op, ctx, arrays, scalars) -> None:
    """Broadcasting decided at run time: check the shapes, then bring every input whose shape
    is not provably right to its broadcast target (a no-op when it already has it, as in the
    common case), so the loops index directly and vectorize."""
    node = ctx.node
    ndim = node.outputs[0].ndim
    out_static = node.outputs[0].type.shape
    modes = _broadcast_modes(ctx, arrays)
    dims = []
    for axis in range(ndim):
        if out_static[axis] is not None:
            dims.append(str(out_static[axis]))
            continue
        cands = [f"{name}.shape[{axis}]" for i, name in arrays
                 if node.inputs[i].type.shape[axis] != 1]
        dims.append(broadcast_dim(ctx, cands,
                                  f"{op}: input shapes cannot be broadcast together"))
    for axis in range(ndim):  # static dims still need checking against run-time shapes
        if out_static[axis] is None:
            continue
        for i, name in arrays:
            if node.inputs[i].type.shape[axis] is None:
                ctx.fail_if(all_of([f"{name}.shape[{axis}] != 1",
                                    f"{name}.shape[{axis}] != {out_static[axis]}"]),
                            "ValueError", f"{op}: input shapes cannot be broadcast together")
    fixed = []
    for i, name in arrays:
        if all(m != "unknown" for m in modes[i]):
            fixed.append((i, name))
            continue
        static = node.inputs[i].type.shape
        target = "(" + "".join("1, " if static[a] == 1 else f"{dims[a]}, "
                               for a in range(ndim)) + ")"
        v = ctx.fresh("v")
        emit_broadcast_copy(ctx, name, v, target, node.inputs[i].dtype, ctx.is_contiguous(i))
        modes[i] = ["bcast" if static[a] == 1 else "full" for a in range(ndim)]
        fixed.append((i, v))
    _emit_elemwise_proven(op, ctx, fixed, scalars, modes, dims)


def _check_specialized(op, ctx, arrays, modes) -> tuple[list[str], dict]:
    """No run-time broadcasting: every dim not statically 1 equals the output's, checked in
    one statement (RuntimeBroadcast otherwise). Far less code than the general path's per-input
    broadcast copies and their helper: mlp_grad's cold compile loses ~1 s. Returns the output
    dims and the broadcasting modes now known."""
    node = ctx.node
    out_static = node.outputs[0].type.shape
    dims, checks = [], []
    for axis in range(node.outputs[0].ndim):
        lengths = [f"{name}.shape[{axis}]" for i, name in arrays
                   if node.inputs[i].type.shape[axis] != 1 and modes[i][axis] == "unknown"]
        proven = [f"{name}.shape[{axis}]" for i, name in arrays if modes[i][axis] == "full"]
        if out_static[axis] is not None:
            dims.append(str(out_static[axis]))
            checks += [(n, dims[-1]) for n in lengths]
            continue
        dims.append((proven + lengths)[0])
        checks += [(n, dims[-1]) for n in lengths if n != dims[-1]]
    ctx.check_equal(checks, "RuntimeBroadcast", str(op))
    modes = {i: ["bcast" if node.inputs[i].type.shape[a] == 1 and m == "unknown" else
                 "full" if m == "unknown" else m for a, m in enumerate(mode)]
             for i, mode in modes.items()}
    return dims, modes


# -- views and shapes ------------------------------------------------------------------------
