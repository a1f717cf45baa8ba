"""numpy indexing: basic (Subtensor, a view), advanced (AdvancedSubtensor) and their functional
updates set_subtensor / inc_subtensor (IncSubtensor, AdvancedIncSubtensor).

An op's `idx_list` prop describes the index structure; the index values are inputs:
  "int"                        an integer (one 0-d integer input)
  "newaxis"                    None (no input)
  "..."                        an Ellipsis that expands to no axes (kept only in advanced
                               indices, where its position matters to numpy's axis placement)
  ("slice", start, stop, step) three booleans: which components are given (one 0-d integer
                               input each, in that order)
  "array"                      an integer or boolean array (advanced indices only)
Constant values stay inputs (Constants), so x[0] and x[1] share one op.
"""

from __future__ import annotations

import numpy as np

from verglas.graph.basic import Apply, Constant, Variable
from verglas.graph.op import Op
from verglas.ops import math as m
from verglas.ops.basic import (MakeVector, Shape, as_tensor, constant, dimshuffle, is_python_scalar,
                               make_vector, shape_i, shape_str)
from verglas.ops.elemwise import _weak_scalar, broadcast_static_shape, sum_to
from verglas.ops.reduce import sum as vsum

__all__ = ["Subtensor", "AdvancedSubtensor", "IncSubtensor", "AdvancedIncSubtensor", "getitem",
           "set_subtensor", "inc_subtensor"]

_INT = "int64"
_FULL = ("slice", False, False, False)


def _n_inputs(entry) -> int:
    if isinstance(entry, tuple):
        return sum(entry[1:])
    return 1 if entry in ("int", "array") else 0


def _is_int(var) -> bool:
    return np.dtype(var.dtype).kind in "iu"


def _static(var):
    return int(var.data) if isinstance(var, Constant) and var.ndim == 0 else None


def _consumed(entry, var) -> int:
    """Number of axes of the indexed array an entry uses."""
    if entry in ("newaxis", "..."):
        return 0
    if entry == "array" and var.dtype == "bool":
        return var.ndim
    return 1


def _pair(idx_list, values):
    """(entry, its input variables) for each entry."""
    it = iter(values)
    return [(e, [next(it) for _ in range(_n_inputs(e))]) for e in idx_list]


def _check_inputs(op, x, values, advanced: bool):
    if sum(_n_inputs(e) for e in op.idx_list) != len(values):
        raise TypeError(f"{op}: expected {sum(_n_inputs(e) for e in op.idx_list)} index "
                        f"inputs, got {len(values)}")
    pairs = _pair(op.idx_list, values)
    used = 0
    for entry, vars_ in pairs:
        for v in vars_:
            if entry == "array":
                if np.dtype(v.dtype).kind not in "iub":
                    raise IndexError(f"{op}: index arrays must be integer or boolean, got "
                                     f"{v.type}")
            elif v.ndim != 0 or not _is_int(v):
                raise TypeError(f"{op}: index {v!r} of type {v.type} is not a 0-d integer")
        if entry == "array" and not advanced:
            raise TypeError(f"{op}: array indices need AdvancedSubtensor")
        if isinstance(entry, tuple) and entry[3] and _static(vars_[-1]) == 0:
            raise ValueError(f"{op}: slice step cannot be zero")
        used += _consumed(entry, vars_[0] if vars_ else None)
    if used > x.ndim:
        raise IndexError(f"{op}: too many indices for an array of shape "
                         f"{shape_str(x.type.shape)} ({used} axes indexed)")
    return pairs


def _slice_static_len(vars_, entry, n):
    comps = iter(vars_)
    start, stop, step = (next(comps) if given else None for given in entry[1:])
    values = [None if v is None else _static(v) for v in (start, stop, step)]
    if step is None or values[2] in (1, -1):
        if start is None and stop is None:
            return n
    if n is None or any(v is None and c is not None for v, c in zip(values, (start, stop, step))):
        return None
    return len(range(*slice(*values).indices(n)))


def _check_int_bound(op, value, n, axis, x):
    if value is not None and n is not None and not -n <= value < n:
        raise IndexError(f"{op}: index {value} is out of bounds for axis {axis} with size {n} "
                         f"(input shape {shape_str(x.type.shape)})")


def _build_index(idx_list, values) -> tuple:
    """The numpy index tuple from the structure and run-time values."""
    out, it = [], iter(values)
    for entry in idx_list:
        if entry == "int":
            out.append(int(next(it)))
        elif entry == "newaxis":
            out.append(None)
        elif entry == "...":
            out.append(Ellipsis)
        elif entry == "array":
            out.append(next(it))
        else:
            out.append(slice(*(int(next(it)) if given else None for given in entry[1:])))
    return tuple(out)


def _rename(op, exc, x_shape):
    """numpy's IndexError/ValueError, re-raised naming the op."""
    return type(exc)(f"{op}: {exc} (input shape {x_shape})")


def _slice_len(vars_, entry, n):
    """Symbolic length of slice `entry` over an axis of symbolic length `n` (numpy rules)."""
    comps = iter(vars_)
    start, stop, step = (m.cast(next(comps), _INT) if given else None for given in entry[1:])

    def clamp(i, lo, hi):
        return m.minimum(m.maximum(m.where(m.lt(i, 0), i + n, i), lo), hi)

    def forward(step):
        s = constant(0, _INT) if start is None else clamp(start, 0, n)
        e = n if stop is None else clamp(stop, 0, n)
        return m.maximum((e - s + step - 1) // step, 0)

    def backward(step):
        s = n - 1 if start is None else clamp(start, -1, n - 1)
        e = constant(-1, _INT) if stop is None else clamp(stop, -1, n - 1)
        return m.maximum((s - e - step - 1) // m.neg(step), 0)  # step may be a nominal input

    if step is None:
        return forward(1)
    known = _static(step)
    if known is not None:
        return forward(step) if known > 0 else backward(step)
    return m.where(m.gt(step, 0), forward(step), backward(step))


class Subtensor(Op):
    """Basic indexing x[ints, slices, None]: a view of `x`."""

    __props__ = ("idx_list",)
    view_map = {0: [0]}

    def __init__(self, idx_list):
        self.idx_list = tuple(idx_list)
        if "array" in self.idx_list or "..." in self.idx_list:
            raise ValueError(f"Subtensor: {self.idx_list} is not a basic index")

    def __repr__(self):
        return f"{type(self).__name__}{{{_structure_str(self.idx_list)}}}"

    def make_node(self, x, *index):
        x = as_tensor(x)
        index = [as_tensor(i) for i in index]
        pairs = _check_inputs(self, x, index, advanced=False)
        shape, axis = [], 0
        for entry, vars_ in pairs:
            if entry == "newaxis":
                shape.append(1)
                continue
            n = x.type.shape[axis]
            if entry == "int":
                _check_int_bound(self, _static(vars_[0]), n, axis, x)
            else:
                shape.append(_slice_static_len(vars_, entry, n))
            axis += 1
        shape.extend(x.type.shape[axis:])
        return Apply(self, [x, *index], [x.type.clone(shape=tuple(shape))])

    def perform(self, node, inputs, outputs):
        x, *values = inputs
        try:  # a trailing Ellipsis makes numpy return a 0-d view rather than a scalar
            outputs[0][0] = x[_build_index(self.idx_list, values) + (Ellipsis,)]
        except (IndexError, ValueError) as exc:
            raise _rename(self, exc, x.shape) from None

    def infer_shape(self, fgraph, node, input_shapes):
        x, *values = node.inputs
        xshape, out, axis = input_shapes[0], [], 0
        for entry, vars_ in _pair(self.idx_list, values):
            if entry == "newaxis":
                out.append(constant(1, _INT))
            elif entry == "int":
                axis += 1
            else:
                out.append(_slice_len(vars_, entry, xshape[axis]))
                axis += 1
        out.extend(xshape[axis:])
        static = node.outputs[0].type.shape
        return [tuple(d if s is None else constant(s, _INT) for d, s in zip(out, static))]

    def L_op(self, inputs, outputs, output_grads):
        x, *values = inputs
        if np.dtype(x.dtype).kind not in "fc":
            return [None] * len(inputs)
        gx = IncSubtensor(self.idx_list, False)(m.zeros_like(x), output_grads[0], *values)
        return [gx] + [None] * len(values)


def _structure_str(idx_list) -> str:
    parts = []
    for e in idx_list:
        if isinstance(e, tuple):
            parts.append(":".join("?" if given else "" for given in e[1:]).rstrip(":") or ":")
        else:
            parts.append({"int": "?", "newaxis": "None", "array": "[?]", "...": "..."}[e])
    return ", ".join(parts)


def _advanced_shape(op, x, pairs):
    """Static output shape of advanced indexing (numpy's placement of the broadcast block)."""
    adv_shapes, adv_pos, out, axis = [], [], [], 0
    first_out, bound_checks = None, []  # (index, axis length, axis, is an integer)
    for pos, (entry, vars_) in enumerate(pairs):
        if entry in ("newaxis", "..."):
            if entry == "newaxis":
                out.append(1)
            continue
        if entry in ("int", "array"):
            v = vars_[0]
            adv_pos.append(pos)
            if first_out is None:
                first_out = len(out)
            if v.dtype == "bool":
                dims = x.type.shape[axis:axis + v.ndim]
                for k, (d, b) in enumerate(zip(dims, v.type.shape)):
                    if d is not None and b is not None and d != b:
                        raise IndexError(
                            f"{op}: boolean index of shape {shape_str(v.type.shape)} does not "
                            f"match the indexed axes {axis}..{axis + v.ndim - 1} of shape "
                            f"{shape_str(x.type.shape)}")
                count = int(np.count_nonzero(v.data)) if isinstance(v, Constant) else None
                adv_shapes.append((count,))
                axis += v.ndim
                continue
            n = x.type.shape[axis]
            if isinstance(v, Constant) and v.data.size and n is not None:
                lo, hi = int(v.data.min()), int(v.data.max())
                bound_checks.append((lo if lo < -n else hi, n, axis, v.ndim == 0))
            adv_shapes.append(v.type.shape)
            axis += 1
            continue
        out.append(_slice_static_len(vars_, entry, x.type.shape[axis]))
        axis += 1
    out.extend(x.type.shape[axis:])
    try:
        block = broadcast_static_shape(adv_shapes, str(op))
    except ValueError:
        raise IndexError(f"{op}: index arrays of shapes "
                         f"{', '.join(shape_str(s) for s in adv_shapes)} cannot be broadcast "
                         f"together") from None
    # numpy checks integers always, index arrays only where their broadcast block is not empty
    block_read = all(d is not None and d > 0 for d in block)
    for value, n, axis, is_int in bound_checks:
        if is_int or block_read:
            _check_int_bound(op, value, n, axis, x)
    adjacent = adv_pos == list(range(adv_pos[0], adv_pos[0] + len(adv_pos)))
    at = first_out if adjacent else 0
    return tuple(out[:at]) + block + tuple(out[at:])


class AdvancedSubtensor(Op):
    """Advanced indexing (integer and boolean arrays, mixed with basic indices): a copy."""

    __props__ = ("idx_list",)

    def __init__(self, idx_list):
        self.idx_list = tuple(idx_list)
        if "array" not in self.idx_list:
            raise ValueError(f"{type(self).__name__}: no array index in {self.idx_list}")

    def __repr__(self):
        return f"{type(self).__name__}{{{_structure_str(self.idx_list)}}}"

    def make_node(self, x, *index):
        x = as_tensor(x)
        index = [as_tensor(i) for i in index]
        pairs = _check_inputs(self, x, index, advanced=True)
        shape = _advanced_shape(self, x, pairs)
        return Apply(self, [x, *index], [x.type.clone(shape=shape)])

    def perform(self, node, inputs, outputs):
        x, *values = inputs
        try:
            outputs[0][0] = np.asarray(x[_build_index(self.idx_list, values)])
        except (IndexError, ValueError) as exc:
            raise _rename(self, exc, x.shape) from None

    def infer_shape(self, fgraph, node, input_shapes):
        x, *values = node.inputs
        value_shapes = iter(input_shapes[1:])
        xshape, out, block, adv_pos, axis, first_out = input_shapes[0], [], [], [], 0, None
        for pos, (entry, vars_) in enumerate(_pair(self.idx_list, values)):
            shapes = [next(value_shapes) for _ in vars_]
            if entry == "newaxis":
                out.append(constant(1, _INT))
            elif entry in ("int", "array"):
                adv_pos.append(pos)
                first_out = len(out) if first_out is None else first_out
                v = vars_[0]
                if v.dtype == "bool":
                    block = _broadcast_dims(block, [m.cast(vsum(v), _INT)])
                    axis += v.ndim
                else:
                    block = _broadcast_dims(block, list(shapes[0]))
                    axis += 1
            elif entry != "...":
                out.append(_slice_len(vars_, entry, xshape[axis]))
                axis += 1
        out.extend(xshape[axis:])
        adjacent = adv_pos == list(range(adv_pos[0], adv_pos[0] + len(adv_pos)))
        at = first_out if adjacent else 0
        dims = out[:at] + block + out[at:]
        static = node.outputs[0].type.shape
        return [tuple(d if s is None else constant(s, _INT) for d, s in zip(dims, static))]

    def L_op(self, inputs, outputs, output_grads):
        x, *values = inputs
        if np.dtype(x.dtype).kind not in "fc":
            return [None] * len(inputs)
        gx = AdvancedIncSubtensor(self.idx_list, False)(m.zeros_like(x), output_grads[0],
                                                        *values)
        return [gx] + [None] * len(values)


def _broadcast_dims(a: list, b: list) -> list:
    """numpy broadcasting of two symbolic shapes (lists of 0-d int64 variables)."""
    ndim = max(len(a), len(b))
    one = constant(1, _INT)
    a = [one] * (ndim - len(a)) + list(a)
    b = [one] * (ndim - len(b)) + list(b)
    out = []
    for da, db in zip(a, b):
        if _static(da) == 1:
            out.append(db)
        elif _static(db) == 1:
            out.append(da)
        else:
            out.append(m.where(m.eq(da, 1), db, da))
    return out


class _IncBase(Op):
    """x with x[idx] set to (or incremented by) v: a new array, or x itself overwritten by the
    `inplace` variant (which only the inplace rewrite builds)."""

    __props__ = ("idx_list", "set_instead_of_inc", "inplace")
    getter: type

    def __init__(self, idx_list, set_instead_of_inc: bool, inplace: bool = False):
        self.idx_list = tuple(idx_list)
        self.set_instead_of_inc = bool(set_instead_of_inc)
        self.inplace = bool(inplace)  # x is overwritten (set by the inplace rewrite only)
        if self.inplace:
            self.destroy_map = {0: [0]}

    def __repr__(self):
        kind = "set" if self.set_instead_of_inc else "inc"
        mark = ", inplace" if self.inplace else ""
        return f"{type(self).__name__}{{{kind}, {_structure_str(self.idx_list)}{mark}}}"

    def make_node(self, x, v, *index):
        x, v = as_tensor(x), as_tensor(v)
        index = [as_tensor(i) for i in index]
        target = self.getter(self.idx_list).make_node(x, *index).outputs[0].type.shape
        # x[idx] += v as numpy: v casts to x's kind, and so does the sum's dtype (int32 +
        # uint64 adds in float64, which cannot go back into int32)
        if not self.set_instead_of_inc and not all(
                np.can_cast(d, x.dtype, "same_kind")
                for d in (v.dtype, np.result_type(v.dtype, x.dtype))):
            raise TypeError(f"{self}: cannot add a value of dtype {v.dtype} into {x.dtype}")
        if v.ndim > len(target):
            raise ValueError(f"{self}: value of shape {shape_str(v.type.shape)} has more "
                             f"dimensions than the indexed shape {shape_str(target)}")
        for d, t in zip(v.type.shape[::-1], target[::-1]):
            if d is not None and d != 1 and t is not None and d != t:
                raise ValueError(f"{self}: value of shape {shape_str(v.type.shape)} cannot "
                                 f"broadcast to the indexed shape {shape_str(target)}")
        return Apply(self, [x, v, *index], [x.type])

    def infer_shape(self, fgraph, node, input_shapes):
        return [input_shapes[0]]

    def L_op(self, inputs, outputs, output_grads):
        x, v, *values = inputs
        (g,) = output_grads
        gx = gv = None
        if np.dtype(x.dtype).kind in "fc":
            gx = g
            if self.set_instead_of_inc:  # overwritten entries do not reach the output
                gx = type(self)(self.idx_list, True)(g, constant(np.zeros((), g.dtype)), *values)
        if np.dtype(v.dtype).kind in "fc":
            gv = sum_to(self.getter(self.idx_list)(g, *values), v).astype(v.dtype)
        return [gx, gv] + [None] * len(values)


class IncSubtensor(_IncBase):
    """set_subtensor / inc_subtensor with a basic index."""

    getter = Subtensor

    def perform(self, node, inputs, outputs):
        x, v, *values = inputs
        out = x if self.inplace else x.copy()
        idx = _build_index(self.idx_list, values) + (Ellipsis,)
        try:
            if self.set_instead_of_inc:
                out[idx] = v
            else:
                out[idx] += v
        except (IndexError, ValueError) as exc:
            raise _rename(self, exc, x.shape) from None
        outputs[0][0] = out


class AdvancedIncSubtensor(_IncBase):
    """set_subtensor / inc_subtensor with an advanced index: repeated indices accumulate for
    inc (as np.add.at) and the last write wins for set (as numpy)."""

    getter = AdvancedSubtensor

    def perform(self, node, inputs, outputs):
        x, v, *values = inputs
        # inplace needs a C-contiguous x (the scatter goes through a flat view); else a copy
        out = x if self.inplace and x.flags.c_contiguous else np.array(x, copy=True, order="C")
        # index the flat positions with the same numpy index, then scatter into the flat view
        ids = np.arange(out.size, dtype=_INT).reshape(out.shape)
        try:
            sel = ids[_build_index(self.idx_list, values)]
        except IndexError as exc:
            if self.set_instead_of_inc:
                _check_set_value(self, ids, values, v, x.shape)
            raise _rename(self, exc, x.shape) from None
        try:
            vals = np.broadcast_to(v, sel.shape)
        except ValueError as exc:
            raise _rename(self, exc, x.shape) from None
        flat = out.reshape(-1)
        if self.set_instead_of_inc:
            flat[sel.ravel()] = vals.ravel()
        else:
            np.add.at(flat, sel.ravel(), vals.ravel())
        outputs[0][0] = out


def _check_set_value(op, ids, values, v, x_shape) -> None:
    """numpy's setitem checks that the value broadcasts to the indexed shape before it checks
    the index arrays' bounds (integer indices come first): a ValueError where the value does
    not, for the shape the index arrays give with in-bounds entries (seed 28282)."""
    safe, it = [], iter(values)
    for entry in op.idx_list:
        if entry in ("newaxis", "..."):
            continue
        for _ in range(1 if entry in ("int", "array") else sum(entry[1:])):
            value = next(it)
            if entry == "array" and value.dtype.kind in "iu":
                value = np.zeros_like(value)  # (an empty axis: an IndexError still)
            safe.append(value)
    try:
        shape = ids[_build_index(op.idx_list, safe)].shape
    except IndexError:
        return
    try:
        np.broadcast_to(v, shape)
    except ValueError as exc:
        raise _rename(op, exc, x_shape) from None


# -- user functions -------------------------------------------------------------------------------
def _index_var(value, what: str) -> Variable:
    """A slice component or integer index as a 0-d integer variable."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"getitem: {what} {value!r} must be an integer, not a bool")
    if isinstance(value, (int, np.integer)):
        return constant(int(value), _INT)
    if isinstance(value, Variable):
        value = as_tensor(value)
        if value.ndim == 0 and _is_int(value):
            return value
        raise TypeError(f"getitem: {what} {value!r} of type {value.type} is not a 0-d integer")
    raise TypeError(f"getitem: {what} {value!r} is not an integer")


def _array_var(value) -> Variable:
    if isinstance(value, Variable):
        return as_tensor(value)
    if isinstance(value, list) and any(isinstance(v, Variable) for v in value):
        return as_tensor(value)  # a list holding symbolic indices is stacked
    arr = np.asarray(value)
    if arr.size == 0 and arr.dtype.kind == "f":  # x[[]] indexes with an empty int array
        arr = arr.astype(_INT)
    if arr.dtype.kind not in "iub":
        raise IndexError(f"getitem: index array of dtype {arr.dtype} must be integer or bool")
    return constant(arr.astype(_INT) if arr.dtype.kind in "iu" else arr)


def _parse_index(x, index):
    """(idx_list, input variables, is_advanced) for a numpy index on `x`."""
    if not isinstance(index, tuple):
        index = (index,)
    items = []  # (entry, vars)
    for it in index:
        if it is None:
            items.append(("newaxis", []))
        elif it is Ellipsis:
            items.append(("...", []))
        elif isinstance(it, slice):
            comps = [(c, name) for c, name in zip((it.start, it.stop, it.step),
                                                  ("start", "stop", "step"))]
            vars_ = [_index_var(c, f"slice {name}") for c, name in comps if c is not None]
            items.append((("slice",) + tuple(c is not None for c, _ in comps), vars_))
        elif isinstance(it, (bool, np.bool_)):
            items.append(("array", [constant(np.asarray(bool(it)))]))
        elif isinstance(it, (int, np.integer)):
            items.append(("int", [constant(int(it), _INT)]))
        elif isinstance(it, Variable):
            var = as_tensor(it)
            if var.ndim == 0 and _is_int(var):
                items.append(("int", [var]))
            elif np.dtype(var.dtype).kind in "iub":
                items.append(("array", [var]))
            else:
                raise IndexError(f"getitem: index {var!r} of type {var.type} is not an integer "
                                 f"or boolean")
        elif isinstance(it, (list, np.ndarray)):
            items.append(("array", [_array_var(it)]))
        else:
            raise IndexError(f"getitem: unsupported index {it!r} of type {type(it).__name__}")
    n_ellipsis = sum(1 for e, _ in items if e == "...")
    if n_ellipsis > 1:
        raise IndexError("getitem: an index can only have a single ellipsis ('...')")
    used = sum(_consumed(e, v[0] if v else None) for e, v in items)
    if used > x.ndim:
        raise IndexError(f"getitem: too many indices for an array of shape "
                         f"{shape_str(x.type.shape)}: {used} axes indexed, ndim is {x.ndim}")
    advanced = any(e == "array" for e, _ in items)
    if n_ellipsis:
        at = [e for e, _ in items].index("...")
        fill = [(_FULL, [])] * (x.ndim - used)
        # an empty Ellipsis still separates advanced indices (numpy's axis placement)
        keep = [("...", [])] if advanced and not fill else []
        items = items[:at] + fill + keep + items[at + 1:]
    idx_list = tuple(e for e, _ in items)
    values = [v for _, vs in items for v in vs]
    return idx_list, values, advanced


def getitem(x, index) -> Variable:
    """x[index] with numpy semantics (basic indexing is a view, advanced indexing a copy)."""
    x = as_tensor(x)
    idx_list, values, advanced = _parse_index(x, index)
    if advanced:
        return AdvancedSubtensor(idx_list)(x, *values)
    owner = x.owner
    # x.shape[i] and x.shape[a:b] with constant indices read the shape directly
    if owner is not None and isinstance(owner.op, (Shape, MakeVector)) and len(idx_list) == 1 \
            and all(isinstance(v, Constant) for v in values):
        n = x.type.shape[0]
        if idx_list[0] == "int":
            i = int(values[0].data)
            if not -n <= i < n:
                raise IndexError(f"getitem: index {i} is out of bounds for a shape vector of "
                                 f"length {n}")
            if isinstance(owner.op, Shape):
                return shape_i(owner.inputs[0], i % n)
            if owner.inputs[i % n].dtype == x.dtype:
                return owner.inputs[i % n]
        elif isinstance(owner.op, Shape):
            comps = iter(values)
            bounds = slice(*(int(next(comps).data) if g else None for g in idx_list[0][1:]))
            if bounds.step != 0:
                return make_vector([shape_i(owner.inputs[0], i)
                                    for i in range(*bounds.indices(n))])
    return Subtensor(idx_list)(x, *values)


def _update(x_idx, v, set_instead_of_inc: bool, name: str) -> Variable:
    owner = getattr(x_idx, "owner", None)
    if owner is None or not isinstance(owner.op, (Subtensor, AdvancedSubtensor)):
        raise TypeError(f"{name}: the first argument must be an indexed variable x[idx], "
                        f"got {x_idx!r}")
    x, *values = owner.inputs
    if is_python_scalar(v) and set_instead_of_inc:  # converted as numpy's x[idx] = v does
        v = constant(_setitem_value(v, x.dtype))
    elif is_python_scalar(v):  # x[idx] += v: a weak scalar (NEP 50)
        v = constant(_weak_scalar(v, [np.dtype(x.dtype)]))
    v = as_tensor(v)
    extra = v.ndim - x_idx.ndim
    # x[i, j] = v (an int per axis) stores one element
    element = len(owner.op.idx_list) == x.ndim and all(e == "int" for e in owner.op.idx_list)
    if set_instead_of_inc and extra > 0 and not element and all(
            d == 1 for d in v.type.shape[:extra]):
        # numpy's x[idx] = v drops leading length-1 axes of v (x[idx] += v does not)
        v = dimshuffle(v, list(range(extra, v.ndim)))
    cls = IncSubtensor if isinstance(owner.op, Subtensor) else AdvancedIncSubtensor
    return cls(owner.op.idx_list, set_instead_of_inc)(x, v, *values)


def _setitem_value(v, dtype) -> np.ndarray:
    """The Python scalar `v` as numpy stores it into an array of `dtype` (an int out of an
    integer dtype's range raises OverflowError; anything to bool is its truth)."""
    out = np.empty((), dtype)
    out[()] = v  # numpy's own errors: OverflowError, ValueError for NaN into an integer
    return out


def set_subtensor(x_idx, v) -> Variable:
    """A copy of x with x[idx] = v, given the indexed variable `x[idx]`."""
    return _update(x_idx, v, True, "set_subtensor")


def inc_subtensor(x_idx, v) -> Variable:
    """A copy of x with x[idx] += v (repeated advanced indices accumulate), given `x[idx]`."""
    return _update(x_idx, v, False, "inc_subtensor")
