"""Row fusion: consecutive 2-d steps that share their leading dimension run as ONE loop over
rows, each step doing its row while the row is in cache.

softmax is max over each row, a shifted exp, a sum over each row and a division: four passes
over the whole array as separate steps, one pass in row order when fused. A step joins a group
when it is an Elemwise over (R, C) or (R, 1) whose broadcasting is proven statically, or a
Sum/Max/Min over axis 1 of an (R, C) array, and R is the very same dimension (the shape graph is
interned, so this is an identity test).
"""

from __future__ import annotations

import numba
import numpy as np

from verglas.cpu_backend.kernels import register_helper
from verglas.cpu_backend.vmath import _as_float, _as_int
from verglas.graph.basic import Constant
from verglas.ops.elemwise import Elemwise
from verglas.ops.reduce import Max, Min, Sum

__all__ = ["row_groups", "emit_row_group"]


_jit_inline = numba.njit(inline="always", error_model="numpy")


# LLVM vectorizes an integer max/min reduction but not a float one (without the 'nnan' flag,
# which NaN semantics forbid): IEEE floats without NaN order like their bits read as
# sign-magnitude integers, so the max of the keys is the key of the max (NaN tracked apart).
# Module-level and registered at import, so a cached program finds them by name.
@register_helper
@_jit_inline
def order_key32(x):
    b = np.int64(_as_int(x))
    return b if b >= 0 else b ^ 0x7FFFFFFF


@register_helper
@_jit_inline
def order_value32(k):
    return _as_float(np.int32(k if k >= 0 else k ^ 0x7FFFFFFF))


@register_helper
@_jit_inline
def order_key64(x):
    b = _as_int(x)
    return b if b >= 0 else b ^ 0x7FFFFFFFFFFFFFFF


@register_helper
@_jit_inline
def order_value64(k):
    return _as_float(k if k >= 0 else k ^ 0x7FFFFFFFFFFFFFFF)


_ORDER = {"float32": (order_key32, order_value32), "float64": (order_key64, order_value64)}


def _order_helpers():
    """(key, value) jitted maps between floats and order-preserving integers, per dtype."""
    return _ORDER

_REDUCES = (Sum, Max, Min)


def _is_reduce(op) -> bool:
    return isinstance(op, _REDUCES) and op.axis == (1,)


def _row_dim(program, step):
    node = step.node
    if isinstance(node.op, Elemwise) and node.outputs[0].ndim == 2:
        return program.shapes.dims_of(step.outputs[0])[0]
    if _is_reduce(node.op) and node.inputs[0].ndim == 2:
        return program.shapes.dims_of(step.inputs[0])[0]
    return None


def _one_element(var) -> bool:
    return all(d == 1 for d in var.type.shape)


def _modes(program, step) -> list | None:
    """Per input of an Elemwise step: ('full'|'bcast', 'full'|'bcast') or 'scalar'; None when
    some broadcasting is only known at run time."""
    shapes = program.shapes
    out_dims = shapes.dims_of(step.outputs[0])
    out_static = step.node.outputs[0].type.shape
    modes = []
    for bid, var in zip(step.inputs, step.node.inputs):
        if var.ndim != 2:
            return None
        if _one_element(var):
            modes.append("scalar")
            continue
        in_dims = shapes.dims_of(bid)
        mode = []
        for k in range(2):
            if in_dims[k] is out_dims[k] or (var.type.shape[k] is not None
                                             and var.type.shape[k] == out_static[k]):
                mode.append("full")
            elif var.type.shape[k] == 1:
                mode.append("bcast")
            else:
                return None
        modes.append(tuple(mode))
    return modes


def _fits(program, step) -> bool:
    op = step.node.op
    if _is_reduce(op):
        return np.dtype(step.node.inputs[0].dtype).kind in "fiu"
    return _modes(program, step) is not None


def row_groups(program) -> dict:
    """{index of a group's first step: the group's steps} for the row-fusable runs."""
    groups = {}
    steps = program.steps
    i = 0
    while i < len(steps):
        rows = _row_dim(program, steps[i])
        j = i
        while (j < len(steps) and rows is not None and _row_dim(program, steps[j]) is rows
               and _fits(program, steps[j])):
            j += 1
        members = steps[i:j]
        if len(members) >= 2 and any(_is_reduce(s.node.op) for s in members):
            groups[i] = list(members)
            i = j
        else:
            i += 1
    return groups


def emit_row_group(contexts) -> None:
    """Emit the steps of one group (their StepContexts, in order) as one loop over rows."""
    from verglas.cpu_backend.kernels import _elemwise_body, literal
    from verglas.cpu_backend.reduce_kernels import _combine, _identity

    ctx0 = contexts[0]
    em = ctx0.em
    program = ctx0.program
    first = contexts[0]
    rows = None
    for i, var in enumerate(first.node.inputs):
        if var.ndim == 2 and program.shapes.dims_of(first.step.inputs[i])[0] is \
                _row_dim(program, first.step):
            rows = f"{first.inp(i)}.shape[0]"
            break
    if rows is None:
        static = first.node.outputs[0].type.shape[0]
        rows = str(static)
    plans = []
    for ctx in contexts:  # allocations and one-element inputs, before the loop
        node = ctx.node
        if _is_reduce(node.op):
            x = ctx.inp(0)
            cols = f"{x}.shape[1]"
            shape = f"({rows}, 1, )" if node.op.keepdims else f"({rows}, )"
            out = ctx.alloc(0, shape)
            if isinstance(node.op, (Max, Min)):
                ctx.line(f"if {cols} == 0:")
                with ctx.indent():
                    ctx.raise_("ValueError", f"{node.op}: zero-size array to a reduction that "
                                             f"has no identity")
            plans.append(("reduce", ctx, x, cols, out))
            continue
        modes = _modes(program, ctx.step)
        scalars, arrays = {}, {}
        for i, (var, mode) in enumerate(zip(node.inputs, modes)):
            if mode == "scalar":
                if isinstance(var, Constant):
                    scalars[i] = literal(var.data.reshape(()), var.type.dtype, ctx)
                else:
                    h = ctx.fresh("h")
                    ctx.line(f"{h} = {ctx.scalar(i) or ctx.inp(i) + '[0, 0]'}")
                    scalars[i] = h
            else:
                arrays[i] = (ctx.inp(i), mode)
        out_static = node.outputs[0].type.shape
        if out_static[1] == 1:
            cols = "1"
        elif out_static[1] is not None:
            cols = str(out_static[1])
        else:
            cols = next(f"{name}.shape[1]" for name, mode in arrays.values() if mode[1] == "full")
        outs = [ctx.alloc(j, f"({rows}, {cols}, )") for j in range(len(node.outputs))]
        plans.append(("elemwise", ctx, scalars, arrays, cols, outs))
    r = ctx0.fresh("r")
    em.line(f"for {r} in range({rows}):")
    em.depth += 1
    for plan in plans:
        if plan[0] == "reduce":
            _, ctx, x, cols, out = plan
            op = ctx.node.op
            out_dtype = ctx.node.outputs[0].dtype
            acc_dtype = "float64" if isinstance(op, Sum) and out_dtype == "float32" else out_dtype
            acc, j, t = ctx.fresh("acc"), ctx.fresh("j"), ctx.fresh("t")
            ctx.line(f"{acc} = {_identity(op, acc_dtype)}")
            nan = None
            if isinstance(op, (Max, Min)) and out_dtype in ("float32", "float64"):
                key, value = (ctx.helper(f"{f.py_func.__name__}_", f)
                              for f in _order_helpers()[out_dtype])
                nan = ctx.fresh("nan")  # tracked apart so the max itself stays a SIMD select
                ctx.line(f"{nan} = False")
                extreme = "-9223372036854775808" if isinstance(op, Max) else \
                    "9223372036854775807"
                ctx.line(f"{acc} = np.int64({extreme})")
                pick = "max" if isinstance(op, Max) else "min"
            ctx.line(f"for {j} in range({cols}):")
            with ctx.indent():
                ctx.line(f"{t} = {x}[{r}, {j}]")
                if nan is not None:
                    ctx.line(f"{acc} = {pick}({acc}, {key}({t}))")
                    ctx.line(f"{nan} = {nan} | ({t} != {t})")
                else:
                    ctx.line(f"{acc} = {_combine(op, acc, t, acc_dtype)}")
            if nan is not None:
                ctx.line(f"{acc} = np.nan if {nan} else {value}({acc})")
            index = f"[{r}, 0]" if op.keepdims else f"[{r}]"
            ctx.line(f"{out}{index} = {acc}")
            continue
        _, ctx, scalars, arrays, cols, outs = plan
        j = ctx.fresh("j")
        inner = cols != "1"
        if inner:
            ctx.line(f"for {j} in range({cols}):")
            em.depth += 1
        col = j if inner else "0"

        def index_of(i, _arrays=arrays, _col=col):
            name, mode = _arrays[i]
            return f"{name}[{r if mode[0] == 'full' else 0}, {_col if mode[1] == 'full' else 0}]"

        _elemwise_body(ctx, ctx.op, scalars, index_of, [f"{o}[{r}, {col}]" for o in outs])
        if inner:
            em.depth -= 1
    em.depth -= 1
