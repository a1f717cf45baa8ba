"""CUDA kernel sources: numba.cuda Python text built from the scalar ops' own `impl` functions.

Every kernel is a plain Python function as text. The scalar implementations it calls are pasted
in as nested defs (numba inlines non-escaping closures), so a kernel compiles with
`numba.cuda.compile_ptx` without a device, and runs unchanged under the CUDA simulator.
A `KernelSpec` carries the source, the function name and the parameter types (the signature
compile_ptx needs, and the argument layout a launcher marshals).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import math
import re
from dataclasses import dataclass

import numpy as np
from numba import from_dtype, types

from verglas.scalar_code import (HELPERS, arith, emit_scalar, helpers_in, substitute,
                                 variant)
from verglas import source
from verglas.source import Emitter, np_dtype
from verglas.ops import scalar as s

__all__ = ["by_content", "KernelSpec", "Arr", "Scal", "KernelBuilder", "scalar_def", "literal",
           "cast_expr", "np_dtype", "REDUCERS", "Reducer", "emit_tree"]





@dataclass(frozen=True)
class Arr:
    """An array parameter: dtype, ndim and numba layout ('C' contiguous or 'A' any strides)."""

    dtype: str
    ndim: int
    layout: str = "A"

    def numba_type(self):
        return types.Array(from_dtype(np.dtype(self.dtype)), self.ndim, self.layout)


@dataclass(frozen=True)
class Scal:
    """A scalar parameter of `dtype`."""

    dtype: str

    def numba_type(self):
        return from_dtype(np.dtype(self.dtype))


@dataclass(frozen=True)
class KernelSpec:
    """One generated kernel: source text, entry function name, parameter types."""

    name: str
    source: str
    params: tuple

    def signature(self):
        """The numba signature `void(params...)` for compile_ptx."""
        return types.void(*[p.numba_type() for p in self.params])

    @functools.cached_property
    def fingerprint(self) -> str:
        h = hashlib.sha256(self.source.encode())
        h.update(repr(self.params).encode())
        return h.hexdigest()[:32]


def by_content(spec: KernelSpec) -> KernelSpec:
    """`spec` renamed after what it computes: `k<digest>_<kind>` (the kind what follows the
    step's name, `k12_rows` -> `rows`), so the same kernel made for two steps or two programs
    is one source, one fingerprint, one compile and one cache entry (mlp_grad's 48 kernels
    are 17)."""
    kind = spec.name.split("_", 1)[1] if "_" in spec.name else "k"
    word = re.compile(rf"\b{re.escape(spec.name)}\b")
    digest = hashlib.sha256(word.sub("KERNEL", spec.source).encode())
    digest.update(repr(spec.params).encode())
    name = f"k{digest.hexdigest()[:12]}_{kind}"
    return KernelSpec(name, word.sub(name, spec.source), spec.params)


# -- float16 ---------------------------------------------------------------------------------------
# A float16 value is a float32 in kernel code, rounded to half precision wherever an op produces
# a float16 (numpy's half loops compute in float32 and round the same way). numba-cuda's own half
# arithmetic calls C++ operator helpers (`_ZmlRK6__halfS1__nbst`, ...) that only its own launcher
# links: a PTX module loaded by itself cannot resolve them (seen on a real GPU).
def cast_expr(expr: str, dtype: str) -> str:
    """`expr` converted to `dtype` in kernel code (float16: rounded, held as float32)."""
    if dtype == "float16":
        return f"np.float32(np.float16({expr}))"
    return source.cast_expr(expr, dtype)


def literal(value, dtype: str) -> str:
    """A typed scalar literal in kernel code (float16: the float32 holding the half value)."""
    if dtype == "float16":
        return source.literal(np.float32(np.float16(value)), "float32")
    return source.literal(value, dtype)


def held(dtype: str) -> str:
    """The dtype kernel code holds a `dtype` value in (shared and local arrays too)."""
    return "float32" if dtype == "float16" else dtype


def load(expr: str, dtype: str) -> str:
    """An element read of a `dtype` array or scalar parameter, as kernel code computes with it."""
    return f"np.float32({expr})" if dtype == "float16" else expr


# -- scalar code ---------------------------------------------------------------------------------
# where numba-cuda's own scalar code is not numpy's (seen on a real GPU; the simulator runs
# Python's and numpy's, which hid them): float % and // (complex log1p, also seen there, is
# scalar_code's complex_log1p on both backends)
_FLOAT_DIVMOD = {"mod": "float_divmod(x, y)[1]", "floor_div": "float_divmod(x, y)[0]"}
_ALLOWED_NAMES = {"math", "abs", "min", "max", "int", "float", "bool"}


def _function_node(fn):
    """The ast node (FunctionDef or Lambda) that defined `fn`, found by its bytecode."""
    code = fn.__code__
    if code.co_freevars or not set(code.co_names) <= _ALLOWED_NAMES | set(dir(math)):
        raise NotImplementedError(f"{fn.__qualname__}: uses names a kernel cannot see")
    tree = ast.parse(inspect.getsource(inspect.getmodule(fn)))
    for node in ast.walk(tree):
        if isinstance(node, ast.Lambda):
            first = node.lineno
        elif isinstance(node, ast.FunctionDef):
            first = min([d.lineno for d in node.decorator_list] + [node.lineno])
        else:
            continue
        if first != code.co_firstlineno:
            continue
        candidate = _as_def("candidate", node)
        imports = ast.parse("import math").body  # as in the defining module: same bytecode
        compiled = compile(ast.Module(imports + [candidate], []), "<verglas>", "exec")
        inner = next(c for c in compiled.co_consts if hasattr(c, "co_code"))
        if inner.co_code == code.co_code and inner.co_names == code.co_names:
            return node
    raise NotImplementedError(f"{fn.__qualname__}: source not found")


def _as_def(name, node):
    if isinstance(node, ast.Lambda):
        out = ast.FunctionDef(name=name, args=node.args, body=[ast.Return(node.body)],
                              decorator_list=[], returns=None, type_params=[])
    else:
        out = ast.FunctionDef(name=name, args=node.args, body=node.body, decorator_list=[],
                              returns=node.returns, type_params=[])
    return ast.fix_missing_locations(out)


@functools.cache
def scalar_def(op_name: str) -> tuple[str, str]:
    """(function name, def source) of scalar op `op_name`'s impl, to paste into a kernel."""
    cls = s.SCALAR_OPS[op_name]
    name = "s_" + re.sub(r"\W", "_", op_name)
    if cls.impl_expr is not None:  # the op is defined by this expression: paste it
        args = ", ".join(("x", "y", "z")[:cls.nin])
        return name, f"def {name}({args}):\n    return {cls.impl_expr}"
    node = _as_def(name, _function_node(cls.impl))
    return name, ast.unparse(node)


def _cuda_variant(sop, arg_dtypes) -> str | None:
    """The expression of `sop` where numba-cuda's scalar code differs from numpy's."""
    kinds = {np.dtype(d).kind for d in arg_dtypes}
    if kinds == {"f"}:
        return _FLOAT_DIVMOD.get(sop.name)
    return None


# ops whose numba result on float32 / float64 operands of one dtype is that dtype
_FLOAT_CLOSED = (s.Add, s.Sub, s.Mul, s.TrueDiv, s.Neg, s.Maximum, s.Minimum, s.Switch)


class KernelBuilder(Emitter):
    """Builds one kernel: parameters, nested scalar defs, body lines."""

    def __init__(self, name: str):
        super().__init__(depth=1)
        self.name = name
        self.params: list[tuple[str, object]] = []
        self.defs: dict[str, str] = {}

    def param(self, prefix: str, ptype) -> str:
        name = self.fresh(prefix)
        self.params.append((name, ptype))
        return name

    def uses(self, expr: str) -> None:
        """Paste in the shared helpers `expr` calls (verglas.scalar_code.HELPERS)."""
        for helper in helpers_in(expr):
            self.defs[helper] = HELPERS[helper]

    def scalar_fn(self, op_name: str) -> str:
        name, src = scalar_def(op_name)
        self.defs[name] = src
        return name

    def decompose(self, flat: str, dims: list[str], prefix: str = "j") -> list[str]:
        """Emit the multi-index (C order) of flat index `flat` over `dims`; return names."""
        if not dims:
            return []
        names = [self.fresh(prefix) for _ in dims]
        rem = self.fresh("r")
        self.line(f"{rem} = {flat}")
        for d in range(len(dims) - 1, 0, -1):
            self.line(f"{names[d]} = {rem} % {dims[d]}")
            self.line(f"{rem} = {rem} // {dims[d]}")
        self.line(f"{names[0]} = {rem}")
        return names

    def scalar_expr(self, sop, args: list[str], arg_dtypes: list[str], out_dtypes) -> list[str]:
        """Emit `sop` on expressions `args` (Composite graphs inlined); return result names."""
        return emit_scalar(sop, args, arg_dtypes, out_dtypes, literal=literal, cast=cast_expr,
                           write_op=self._write_op)

    def _write_op(self, sop, args: list[str], arg_dtypes: list[str], out_dtype: str) -> str:
        """Emit one (non-Composite) scalar op on arguments of its loop's dtypes; its name."""
        name = self.fresh("t")
        real_out = np.dtype(out_dtype).kind not in "cb"
        if isinstance(sop, (s.Cast, s.Identity)):
            expr = args[0]
            if np.dtype(arg_dtypes[0]).kind == "c" and real_out:
                expr = f"({expr}).real"  # numpy keeps the real part
        elif isinstance(sop, (s.Neg, s.Invert)) and arg_dtypes[0] == "bool":
            expr = f"not {args[0]}"
        elif (special := _cuda_variant(sop, arg_dtypes)) is not None:
            self.uses(special)
            expr = substitute(special, args)
        elif (special := variant(sop, arg_dtypes)) is not None:
            self.uses(special)
            expr = substitute(special, args)
        elif getattr(sop, "impl_expr", None) is not None:  # inline: a nested def per op
            expr = f"({substitute(sop.impl_expr, args)})"  # cost numba-cuda ~0.1 s a kernel
            if out_dtype in ("float32", "float64") and isinstance(sop, _FLOAT_CLOSED) \
                    and all(d == out_dtype for d in arg_dtypes):
                self.line(f"{name} = {expr}")  # (no cast to type: numba's own result type)
                return name
        else:
            expr = f"{self.scalar_fn(sop.name)}({', '.join(args)})"
        self.line(f"{name} = {cast_expr(expr, out_dtype)}")
        return name

    def spec(self) -> KernelSpec:
        header = f"def {self.name}({', '.join(n for n, _ in self.params)}):"
        defs = ["    " + line for src in self.defs.values() for line in src.splitlines()]
        source = "\n".join([header] + defs + self.lines) + "\n"
        return KernelSpec(self.name, source, tuple(p for _, p in self.params))


# -- reductions ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Reducer:
    """How a reduction accumulates: accumulator dtype, identity, combine, final conversion."""

    acc: str
    identity: str
    combine: str  # a format string over {a} and {b}
    to_acc: str  # a format string over {x}
    final: str  # a format string over {a}


def _float_max(a, b):
    return f"({a} if {a} != {a} else ({b} if {b} != {b} else ({a} if {a} >= {b} else {b})))"


def _float_min(a, b):
    return f"({a} if {a} != {a} else ({b} if {b} != {b} else ({a} if {a} <= {b} else {b})))"


def _extreme_identity(dtype: str, largest: bool) -> str:
    kind = np.dtype(dtype).kind
    if kind == "c":  # the lexicographic extremes
        return literal(complex(-np.inf, -np.inf) if largest else complex(np.inf, np.inf), dtype)
    if kind == "f":
        return literal(-np.inf if largest else np.inf, dtype)
    info = np.iinfo(dtype)
    return literal(info.min if largest else info.max, dtype)


def REDUCERS(kind: str, in_dtype: str, out_dtype: str) -> Reducer:
    """The Reducer of reduction `kind` (sum prod max min any all) from `in_dtype`."""
    if kind in ("any", "all") or (out_dtype == "bool" and kind in ("max", "min")):
        # booleans accumulate as 0/1 bytes: or is max, and is min
        largest = kind in ("any", "max")
        return Reducer("uint8", "np.uint8(0)" if largest else "np.uint8(1)",
                       "max({a}, {b})" if largest else "min({a}, {b})",
                       "np.uint8({x} != 0)", "({a} != 0)")
    # (float32 and float64 values need no cast to their own type: numba types each cast
    # call, which was a good part of a reduction kernel's compile time)
    closed = in_dtype == out_dtype and out_dtype in ("float32", "float64")
    cast = "{x}" if closed else load(f"{np_dtype(out_dtype)}({{x}})", out_dtype)
    if kind in ("sum", "prod"):  # (signed integers wrap around: scalar_code.arith)
        op, one = ("+", 0) if kind == "sum" else ("*", 1)
        combine = arith(op, "{a}", "{b}", out_dtype)
        if not (closed or out_dtype in ("float32", "float64")):
            combine = cast_expr(combine, out_dtype)
        return Reducer(out_dtype, literal(one, out_dtype), combine, cast, "{a}")
    largest = kind == "max"
    if np.dtype(out_dtype).kind == "c":  # numpy's lexicographic maximum/minimum
        helper = "complex_maximum" if largest else "complex_minimum"
        return Reducer(out_dtype, _extreme_identity(out_dtype, largest),
                       f"{helper}({{a}}, {{b}})", cast, "{a}")
    if np.dtype(out_dtype).kind == "f":
        comb = _float_max("{a}", "{b}") if largest else _float_min("{a}", "{b}")
    else:
        comb = "max({a}, {b})" if largest else "min({a}, {b})"
    return Reducer(out_dtype, _extreme_identity(out_dtype, largest), comb, cast, "{a}")


# elements a thread of a flat map or a row reduction loads before it computes on them: loads in
# flight together (one at a time, a grid-stride loop reached ~25% of an H100's bandwidth)
UNROLL = 4


# -- kernel sources ------------------------------------------------------------------------------
# Operand kinds of elementwise-style kernels:
#   ("array", dtype)      an array with the loop's shape (broadcast views have zero strides)
#   ("one", dtype)        a size-1 array, read at [0] (statically all-length-1 inputs)
#   ("arg", dtype)        a scalar kernel argument (a 0-d value held by the host)
#   ("lit", dtype, text)  a literal in the source (a 0-d constant)
#   ("at", dtype, ndim, index)  one element of an ndim-d array at a constant index
def _operand_params(kb, operands, rank: int, layout: str):
    """Declare the parameters of `operands`; return (read, name of the first array operand),
    read(k, index) being the expression reading operand k at `index`."""
    reads = []
    first = None
    for op in operands:
        kind, dtype = op[0], op[1]
        if kind == "array":
            name = kb.param("a", Arr(dtype, rank, layout))
            reads.append(("array", name, dtype))
            first = first or name
        elif kind == "one":
            name = kb.param("a", Arr(dtype, 1, "A"))
            reads.append(("fixed", load(f"{name}[0]", dtype), dtype))
        elif kind == "arg":
            name = kb.param("v", Scal(dtype))
            reads.append(("fixed", load(name, dtype), dtype))
        elif kind == "at":  # one element of an array: ("at", dtype, its ndim, index text)
            name = kb.param("a", Arr(dtype, op[2], "A"))
            reads.append(("fixed", load(f"{name}[{op[3]}]", dtype), dtype))
        else:
            reads.append(("fixed", op[2], dtype))

    def read(k: int, index: str) -> str:
        kind, text, dtype = reads[k]
        return load(f"{text}[{index}]", dtype) if kind == "array" else text

    return read, first


def map_kernel(name, sop, operands, out_dtypes, rank: int, flat: bool) -> KernelSpec:
    """An Elemwise/Composite step: one grid-stride loop over the flattened output.

    `flat`: every array operand and output is C-contiguous of the output's size (flat index);
    otherwise arrays have rank `rank` and any strides (zero strides broadcast).
    """
    kb = KernelBuilder(name)
    layout, ndim = ("C", 1) if flat else ("A", rank)
    outs = [kb.param("o", Arr(d, ndim, layout)) for d in out_dtypes]
    read, _ = _operand_params(kb, operands, ndim, layout)
    n = kb.param("n", Scal("int64"))
    dtypes = [o[1] for o in operands]
    if flat and UNROLL > 1:
        _unrolled_flat_loop(kb, sop, operands, dtypes, read, outs, out_dtypes, n)
        return kb.spec()
    kb.line(f"for i in range(cuda.grid(1), {n}, cuda.gridsize(1)):")
    with kb.indent():
        if flat:
            index = "i"
        else:
            index = ", ".join(kb.decompose("i", [f"{outs[0]}.shape[{d}]" for d in range(rank)]))
        args = [read(k, index) for k in range(len(operands))]
        results = kb.scalar_expr(sop, args, dtypes, list(out_dtypes))
        for o, r in zip(outs, results):
            kb.line(f"{o}[{index}] = {r}")
    return kb.spec()


def _unrolled_flat_loop(kb, sop, operands, dtypes, read, outs, out_dtypes, n) -> None:
    """The grid-stride loop of a flat map, UNROLL elements a trip (i, i + s, ...: still
    coalesced), every load issued before any arithmetic so that they are in flight together;
    then the remaining elements one at a time. Written as two loops of UNROLL trips over
    registers (a local array each operand, which NVVM unrolls and keeps in registers: the
    same PTX), so numba types and lowers the body once, not UNROLL times."""
    arrays = [k for k, o in enumerate(operands) if o[0] == "array"]
    if not arrays:  # every element alike (a count, a scale): computed once, then stored
        results = kb.scalar_expr(sop, [read(k, "0") for k in range(len(operands))], dtypes,
                                 list(out_dtypes))
        kb.line(f"for i in range(cuda.grid(1), {n}, cuda.gridsize(1)):")
        with kb.indent():
            for o, r in zip(outs, results):
                kb.line(f"{o}[i] = {r}")
        return
    kb.line("s = cuda.gridsize(1)")
    kb.line("i = cuda.grid(1)")
    if all(np.dtype(dtypes[k]).kind in "fiu" for k in arrays):
        regs = {k: kb.fresh("x") for k in arrays}
        for k, name in regs.items():
            kb.line(f"{name} = cuda.local.array({UNROLL}, np.{held(dtypes[k])})")
        fixed = {}  # the operands every element reads alike: an array's element read once
        for k in range(len(operands)):
            if k not in regs:
                fixed[k] = read(k, "i")
                if operands[k][0] in ("one", "at"):
                    fixed[k] = kb.fresh("c")
                    kb.line(f"{fixed[k]} = {read(k, 'i')}")
        kb.line(f"while i + {UNROLL - 1} * s < {n}:")
        with kb.indent():
            kb.line(f"for u in range({UNROLL}):")
            with kb.indent():
                for k, name in regs.items():
                    kb.line(f"{name}[u] = {read(k, 'i + u * s')}")
            kb.line(f"for u in range({UNROLL}):")
            with kb.indent():
                args = [f"{regs[k]}[u]" if k in regs else fixed[k]
                        for k in range(len(operands))]
                for o, r in zip(outs, kb.scalar_expr(sop, args, dtypes, list(out_dtypes))):
                    kb.line(f"{o}[i + u * s] = {r}")
            kb.line(f"i += {UNROLL} * s")
        _flat_tail(kb, sop, operands, dtypes, read, outs, out_dtypes, n)
        return
    kb.line(f"while i + {UNROLL - 1} * s < {n}:")
    with kb.indent():
        lanes = ["i"] + [f"i + {j} * s" for j in range(1, UNROLL)]
        loaded = [{k: kb.fresh("x") for k in arrays} for _ in lanes]
        for index, names in zip(lanes, loaded):
            for k, name in names.items():
                kb.line(f"{name} = {read(k, index)}")
        results = [kb.scalar_expr(sop, [names.get(k) or read(k, index)
                                         for k in range(len(operands))], dtypes, list(out_dtypes))
                   for index, names in zip(lanes, loaded)]
        for index, rs in zip(lanes, results):
            for o, r in zip(outs, rs):
                kb.line(f"{o}[{index}] = {r}")
        kb.line(f"i += {UNROLL} * s")
    _flat_tail(kb, sop, operands, dtypes, read, outs, out_dtypes, n)


def _flat_tail(kb, sop, operands, dtypes, read, outs, out_dtypes, n) -> None:
    """The elements a flat map's unrolled loop leaves, one at a time."""
    kb.line(f"while i < {n}:")
    with kb.indent():
        args = [read(k, "i") for k in range(len(operands))]
        for o, r in zip(outs, kb.scalar_expr(sop, args, dtypes, list(out_dtypes))):
            kb.line(f"{o}[i] = {r}")
        kb.line("i += s")


def copy_kernel(name, src_dtype, dst_dtype, rank: int, mode: str = "set") -> KernelSpec:
    """dst[...] = src[...] (or +=), with a dtype conversion; any strides, rank `rank`."""
    kb = KernelBuilder(name)
    dst = kb.param("dst", Arr(dst_dtype, rank))
    src = kb.param("src", Arr(src_dtype, rank))
    n = kb.param("n", Scal("int64"))
    kb.line(f"for i in range(cuda.grid(1), {n}, cuda.gridsize(1)):")
    with kb.indent():
        index = ", ".join(kb.decompose("i", [f"{dst}.shape[{d}]" for d in range(rank)]))
        value = cast_expr(f"{src}[{index}]", dst_dtype)
        if mode == "add":
            total = arith("+", f"{dst}[{index}]", value, dst_dtype)
            kb.line(f"{dst}[{index}] = {cast_expr(total, dst_dtype)}")
        else:
            kb.line(f"{dst}[{index}] = {value}")
    return kb.spec()


def _reduce_value(kb, sop, operands, read, index, in_dtype):
    """The value a reduction folds at `index`: the fused map's result or the operand."""
    if sop is None:
        return read(0, index)
    (value,) = kb.scalar_expr(sop, [read(k, index) for k in range(len(operands))],
                              [o[1] for o in operands], [in_dtype])
    return value


def emit_tree(kb, red: Reducer, sm: str, lane: str, width) -> None:
    """Emit the shared-memory tree that folds each group of `width` (a power of two) partial
    values sm[tid] into the group's first, `lane` being the thread's place in its group."""
    kb.line(f"h = {width} // 2")
    kb.line("while h > 0:")
    with kb.indent():
        kb.line(f"if {lane} < h:")
        with kb.indent():
            kb.line(f"{sm}[tid] = {red.combine.format(a=f'{sm}[tid]', b=f'{sm}[tid + h]')}")
        kb.line("cuda.syncthreads()")
        kb.line("h //= 2")


def reduce_rows_kernel(name, red: Reducer, sop, operands, in_dtype, out_dtype, nk: int,
                       nr: int, threads: int) -> KernelSpec:
    """Rows of a (kept..., reduced...) view reduced by groups of G threads in shared memory.

    A block of `threads` threads holds threads // G groups; a group folds one row (or, with
    S > 1 splits, a 1/S share of it into a partial result at dest[row * S + split]) and the
    group's partial values meet in a shared-memory tree. G = threads is one block per row;
    a small G packs many short rows (softmax-like shapes) into one block.
    """
    kb = KernelBuilder(name)
    dest = kb.param("dest", Arr(out_dtype, 1, "C"))
    read, view = _operand_params(kb, operands, nk + nr, "A")
    m, k, g, nsplit = (kb.param(p, Scal("int64")) for p in ("m", "k", "g", "s"))
    kb.uses(red.combine)
    kb.line(f"sm = cuda.shared.array({threads}, {np_dtype(held(red.acc))})")
    kb.line("tid = cuda.threadIdx.x")
    kb.line(f"lane = tid % {g}")
    kb.line(f"gpb = {threads} // {g}")
    kb.line(f"total = {m} * {nsplit}")
    kb.line("base = cuda.blockIdx.x * gpb")
    kb.line("while base < total:")  # uniform over the block: every thread reaches syncthreads
    with kb.indent():
        kb.line(f"grp = base + tid // {g}")
        kb.line(f"acc = {red.identity}")
        kb.line("if grp < total:")
        with kb.indent():
            kb.line(f"row = grp // {nsplit}")
            kb.line(f"col = (grp - row * {nsplit}) * {g} + lane")
            kb.line(f"step = {nsplit} * {g}")
            rows = kb.decompose("row", [f"{view}.shape[{d}]" for d in range(nk)], "p")
            col_dims = [f"{view}.shape[{d}]" for d in range(nk, nk + nr)]

            def fold(lanes):  # the values at columns `lanes`, then folded in order
                values = [_reduce_value(kb, sop, operands, read,
                                        ", ".join(rows + kb.decompose(c, col_dims, "q")),
                                        in_dtype) for c in lanes]
                for value in values:
                    kb.line(f"acc = {red.combine.format(a='acc', b=red.to_acc.format(x=value))}")

            if UNROLL > 1 and np.dtype(in_dtype).kind in "fiu":
                # loads in flight together, as in a flat map: a loop of UNROLL trips into
                # registers, which NVVM unrolls (numba types the body once)
                kb.line(f"while col + {UNROLL - 1} * step < {k}:")
                with kb.indent():
                    vals = kb.fresh("v")
                    kb.line(f"{vals} = cuda.local.array({UNROLL}, np.{held(in_dtype)})")
                    kb.line(f"for u in range({UNROLL}):")
                    with kb.indent():
                        index = ", ".join(rows + kb.decompose("col + u * step", col_dims, "q"))
                        kb.line(f"{vals}[u] = "
                                f"{_reduce_value(kb, sop, operands, read, index, in_dtype)}")
                    kb.line(f"for u in range({UNROLL}):")
                    with kb.indent():
                        value = red.to_acc.format(x=f"{vals}[u]")
                        kb.line(f"acc = {red.combine.format(a='acc', b=value)}")
                    kb.line(f"col += {UNROLL} * step")
            elif UNROLL > 1:
                kb.line(f"while col + {UNROLL - 1} * step < {k}:")
                with kb.indent():
                    fold(["col"] + [f"col + {j} * step" for j in range(1, UNROLL)])
                    kb.line(f"col += {UNROLL} * step")
            kb.line(f"while col < {k}:")
            with kb.indent():
                fold(["col"])
                kb.line("col += step")
        kb.line("sm[tid] = acc")
        kb.line("cuda.syncthreads()")
        emit_tree(kb, red, "sm", "lane", g)
        kb.line("if lane == 0 and grp < total:")
        with kb.indent():
            kb.line(f"{dest}[grp] = {red.final.format(a='sm[tid]')}")
        kb.line("cuda.syncthreads()")
        kb.line("base += cuda.gridDim.x * gpb")
    return kb.spec()


def reduce_cols_kernel(name, red: Reducer, sop, operands, in_dtype, out_dtype, nk: int,
                       nr: int) -> KernelSpec:
    """One thread per output element, a serial loop over the reduced axes: coalesced when the
    reduced axes are the outer ones (a sum over axis 0 of a row-major matrix)."""
    kb = KernelBuilder(name)
    dest = kb.param("dest", Arr(out_dtype, 1, "C"))
    read, view = _operand_params(kb, operands, nk + nr, "A")
    m, k = kb.param("m", Scal("int64")), kb.param("k", Scal("int64"))
    kb.uses(red.combine)
    kb.line(f"for row in range(cuda.grid(1), {m}, cuda.gridsize(1)):")
    with kb.indent():
        rows = kb.decompose("row", [f"{view}.shape[{d}]" for d in range(nk)], "p")
        kb.line(f"acc = {red.identity}")
        kb.line(f"for col in range({k}):")
        with kb.indent():
            cols = kb.decompose("col", [f"{view}.shape[{d}]" for d in range(nk, nk + nr)], "q")
            value = _reduce_value(kb, sop, operands, read, ", ".join(rows + cols), in_dtype)
            kb.line(f"acc = {red.combine.format(a='acc', b=red.to_acc.format(x=value))}")
        kb.line(f"{dest}[row] = {red.final.format(a='acc')}")
    return kb.spec()


def arg_kernel(name, dtype, largest: bool, nk: int, nr: int, threads: int,
               split: bool = False) -> KernelSpec:
    """Argmax/argmin over the reduced axes of a (kept..., reduced...) view: the first index of
    the extreme value, NaN counting as the extreme (numpy).

    `split`: the first pass of a row split over `s` chunks (a few long rows: every block
    busy): each (row, chunk) writes its extreme and that element's index in the row into
    `pv`, `pi` (m * s entries); a second pass (host.run_arg) picks per row among them."""
    kb = KernelBuilder(name)
    if split:
        pv = kb.param("pv", Arr(dtype, 1, "C"))
        dest = kb.param("pi", Arr("int64", 1, "C"))
    else:
        dest = kb.param("dest", Arr("int64", 1, "C"))
    x = kb.param("x", Arr(dtype, nk + nr))
    m, k, g = (kb.param(p, Scal("int64")) for p in ("m", "k", "g"))
    n_split = kb.param("s", Scal("int64")) if split else None
    if np.dtype(dtype).kind == "c":  # numpy orders complex numbers lexicographically
        kb.uses("complex_lt(a, b)")

        def beats(a, b):
            return f"complex_lt({b}, {a})" if largest else f"complex_lt({a}, {b})"
    else:
        def beats(a, b):
            return f"{a} {'>' if largest else '<'} {b}"
    kb.line(f"sv = cuda.shared.array({threads}, {np_dtype(held(dtype))})")
    kb.line(f"si = cuda.shared.array({threads}, np.int64)")
    kb.line("tid = cuda.threadIdx.x")
    kb.line(f"lane = tid % {g}")
    kb.line(f"gpb = {threads} // {g}")
    kb.line("base = cuda.blockIdx.x * gpb")
    units = f"{m} * {n_split}" if split else m  # what a group of g threads reduces
    kb.line(f"while base < {units}:")
    with kb.indent():
        kb.line(f"unit = base + tid // {g}")
        if split:  # (row, chunk): the chunk's columns [start, stop)
            kb.line(f"row = unit // {n_split}")
            kb.line(f"length = ({k} + {n_split} - 1) // {n_split}")
            kb.line(f"start = (unit % {n_split}) * length")
            kb.line(f"stop = min(start + length, {k})")
        else:
            kb.line("row = unit")
            kb.line("start = 0")
            kb.line(f"stop = {k}")
        kb.line(f"bv = {literal(0, dtype)}")
        kb.line("bi = -1")
        kb.line(f"if unit < {units}:")
        with kb.indent():
            kb.line(f"for col in range(start + lane, stop, {g}):")
            with kb.indent():
                rows = kb.decompose("row", [f"{x}.shape[{d}]" for d in range(nk)], "p")
                cols = kb.decompose("col", [f"{x}.shape[{d}]" for d in range(nk, nk + nr)], "q")
                element = f"{x}[{', '.join(rows + cols)}]"
                kb.line(f"v = {load(element, dtype)}")
                kb.line(f"if bi < 0 or (v != v and bv == bv) or {beats('v', 'bv')}:")
                with kb.indent():
                    kb.line("bv = v")
                    kb.line("bi = col")
        kb.line("sv[tid] = bv")
        kb.line("si[tid] = bi")
        kb.line("cuda.syncthreads()")
        kb.line(f"h = {g} // 2")
        kb.line("while h > 0:")
        with kb.indent():
            kb.line("if lane < h:")
            with kb.indent():
                kb.line("av = sv[tid]")
                kb.line("ai = si[tid]")
                kb.line("cv = sv[tid + h]")
                kb.line("ci = si[tid + h]")
                kb.line("if ci >= 0:")
                with kb.indent():
                    kb.line(f"if ai < 0 or (cv != cv and (av == av or ci < ai)) or (av == av and "
                            f"({beats('cv', 'av')} or (cv == av and ci < ai))):")
                    with kb.indent():
                        kb.line("sv[tid] = cv")
                        kb.line("si[tid] = ci")
            kb.line("cuda.syncthreads()")
            kb.line("h //= 2")
        kb.line(f"if lane == 0 and unit < {units}:")
        with kb.indent():
            kb.line(f"{dest}[unit] = si[tid]")
            if split:
                kb.line(f"{pv}[unit] = sv[tid]")
        kb.line("cuda.syncthreads()")
        kb.line("base += cuda.gridDim.x * gpb")
    return kb.spec()


def cumsum_kernel(name, in_dtype, out_dtype, rank: int) -> KernelSpec:
    """One thread per row of a (rows..., axis) view: a serial running sum along the last axis."""
    kb = KernelBuilder(name)
    out = kb.param("out", Arr(out_dtype, rank))
    x = kb.param("x", Arr(in_dtype, rank))
    m, k = kb.param("m", Scal("int64")), kb.param("k", Scal("int64"))
    kb.line(f"for row in range(cuda.grid(1), {m}, cuda.gridsize(1)):")
    with kb.indent():
        rows = kb.decompose("row", [f"{x}.shape[{d}]" for d in range(rank - 1)], "p")
        # -0.0 + v is v for every v: the first element is kept as it is (numpy's accumulate)
        kb.line(f"acc = {literal(-0.0 if np.dtype(out_dtype).kind in 'fc' else 0, out_dtype)}")
        kb.line(f"for col in range({k}):")
        with kb.indent():
            index = ", ".join(rows + ["col"])
            value = cast_expr(f"{x}[{index}]", out_dtype)
            kb.line(f"acc = {cast_expr(arith('+', 'acc', value, out_dtype), out_dtype)}")
            kb.line(f"{out}[{index}] = acc")
    return kb.spec()


def arange_kernel(name, dtype) -> KernelSpec:
    """out[i] = start + i * delta, computed in float64 (floats) or int64 (ints) as numpy."""
    kb = KernelBuilder(name)
    out = kb.param("out", Arr(dtype, 1, "C"))
    calc = "float64" if np.dtype(dtype).kind == "f" else "int64"
    start, delta = kb.param("start", Scal(calc)), kb.param("delta", Scal(calc))
    n = kb.param("n", Scal("int64"))
    kb.line(f"for i in range(cuda.grid(1), {n}, cuda.gridsize(1)):")
    with kb.indent():
        kb.line(f"{out}[i] = {cast_expr(f'{start} + i * {delta}', dtype)}")
    return kb.spec()


def index_kernel(name, scatter: str | None, x_dtype, v_dtype, x_rank: int, entries,
                 out_rank: int, block_at: int, block_rank: int) -> KernelSpec:
    """Advanced indexing over a view whose axes are each a full slice or an integer index.

    `entries`: per axis of the indexed view, ("slice",) or ("array", dtype) or ("int",).
    The loop runs over the indexed shape (out_rank axes: the sliced axes in order with the
    broadcast block of the index arrays inserted at `block_at`). Gather (`scatter` None):
    out[j] = x[idx(j)]. Scatter: x[idx(j)] = v[j] ("set") or atomically += v[j] ("add").
    numpy's set keeps the last value an element is given: "claim" (x an int64 array of -1s)
    makes each element's entry the largest j that writes it, then "set" (given that array,
    `win`) writes only that j's value.
    Out-of-bounds indices set err[0] = 1 and are not followed.
    """
    kb = KernelBuilder(name)
    if scatter is None:
        out = kb.param("out", Arr(x_dtype, out_rank))
    else:
        out = kb.param("v", Arr(v_dtype, out_rank))
    x = kb.param("x", Arr(x_dtype, x_rank))
    win = kb.param("win", Arr("int64", x_rank)) if scatter == "set" else None
    idx = []
    for e in entries:
        if e[0] == "array":
            idx.append(kb.param("ix", Arr(e[1], block_rank)))
        elif e[0] == "int":
            idx.append(kb.param("iv", Scal("int64")))
        else:
            idx.append(None)
    err = kb.param("err", Arr("int32", 1, "C"))
    n = kb.param("n", Scal("int64"))
    kb.line(f"for i in range(cuda.grid(1), {n}, cuda.gridsize(1)):")
    with kb.indent():
        j = kb.decompose("i", [f"{out}.shape[{d}]" for d in range(out_rank)])
        block = j[block_at:block_at + block_rank]
        rest = iter(j[:block_at] + j[block_at + block_rank:])
        kb.line("ok = True")
        xi = []
        for axis, (e, ix) in enumerate(zip(entries, idx)):
            if e[0] == "slice":
                xi.append(next(rest))
                continue
            name_ = kb.fresh("x")
            read = f"{ix}[{', '.join(block)}]" if e[0] == "array" else ix
            kb.line(f"{name_} = np.int64({read})")
            kb.line(f"if {name_} < 0:")
            with kb.indent():
                kb.line(f"{name_} += {x}.shape[{axis}]")
            kb.line(f"if {name_} < 0 or {name_} >= {x}.shape[{axis}]:")
            with kb.indent():
                kb.line(f"{err}[0] = 1")
                kb.line("ok = False")
            xi.append(name_)
        kb.line("if ok:")
        with kb.indent():
            src = f"{x}[{', '.join(xi)}]"
            dst = f"{out}[{', '.join(j)}]"
            # one axis: a plain index (numba-cuda cannot lower a 1-tuple index of an
            # integer array's atomic add; seen on a real GPU, not in the simulator)
            where = xi[0] if len(xi) == 1 else f"({', '.join(xi)})"
            if scatter is None:
                kb.line(f"{dst} = {src}")
            elif scatter == "claim":
                kb.line(f"cuda.atomic.max({x}, {where}, np.int64(i))")
            elif scatter == "set":
                kb.line(f"if {win}[{', '.join(xi)}] == i:")
                with kb.indent():
                    kb.line(f"{src} = {cast_expr(dst, x_dtype)}")
            else:
                kb.line(f"cuda.atomic.add({x}, {where}, {cast_expr(dst, x_dtype)})")
    return kb.spec()
