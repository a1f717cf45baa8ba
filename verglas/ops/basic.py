"""The base of the array language: constants and `as_tensor`, and the structural ops every
other module builds on (no arithmetic): shape reads (Shape, ShapeI, MakeVector), views of axes
(DimShuffle: transpose, expand_dims, squeeze) and joins (Join: concatenate, stack, and the
stacking of a list that holds variables, which `as_tensor` does)."""

from __future__ import annotations

import numbers

import numpy as np

from verglas.graph.basic import Apply, Constant, Variable
from verglas.graph.op import Op
from verglas.graph.types import TensorType

__all__ = ["is_python_scalar", "constant", "as_tensor", "shape_str", "normalize_axis",
           "DimShuffle", "dimshuffle", "transpose", "expand_dims", "squeeze", "Shape", "ShapeI",
           "MakeVector", "shape", "shape_i", "make_vector", "Join", "concatenate", "stack"]

_INT = "int64"


def shape_str(shape) -> str:
    inner = ", ".join("?" if s is None else str(s) for s in shape)
    return f"({inner},)" if len(shape) == 1 else f"({inner})"


def is_python_scalar(x) -> bool:
    return isinstance(x, (bool, numbers.Number)) and not isinstance(x, (np.generic, np.ndarray))


def constant(value, dtype=None, name: str | None = None) -> Constant:
    """A constant array (Python floats default to float64, ints to int64 where it holds them)."""
    if isinstance(value, Variable):
        raise TypeError(f"constant: {value!r} is already symbolic")
    arr = np.asarray(value, dtype=dtype)
    if arr.dtype == object:
        raise TypeError(f"constant: cannot make an array of {value!r}")
    if dtype is None and is_python_scalar(value) and isinstance(value, int) \
            and not isinstance(value, bool) and -2**63 <= value < 2**63:
        arr = np.asarray(value, dtype="int64")  # (numpy's own choice beyond: uint64)
    ttype = TensorType(arr.dtype, arr.shape)
    return ttype.constant_class(ttype, arr, name)  # TensorConstant (variable.py)


def as_tensor(x, dtype=None, name: str | None = None) -> Variable:
    """`x` as a tensor variable: variables pass through, values become constants."""
    if isinstance(x, Variable):
        if not isinstance(x.type, TensorType):
            raise TypeError(f"as_tensor: {x!r} has type {x.type}, not a tensor type")
        if dtype is not None and np.dtype(dtype).name != x.dtype:
            return x.astype(dtype)
        return x
    if isinstance(x, (list, tuple)) and any(isinstance(e, Variable) for e in _flat(x)):
        return stack([as_tensor(e, dtype) for e in x])
    return constant(x, dtype, name)


def _flat(x):
    for e in x:
        if isinstance(e, (list, tuple)):
            yield from _flat(e)
        else:
            yield e


def normalize_axis(axis, ndim: int, op_name: str) -> tuple[int, ...]:
    """`axis` (None, int or tuple, negatives allowed) as a sorted tuple of axes in [0, ndim)."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, Variable):
        raise TypeError(f"{op_name}: axis must be a Python int or tuple, not symbolic {axis!r}")
    axes = (axis,) if not isinstance(axis, (tuple, list)) else tuple(axis)
    out = []
    for a in axes:
        if isinstance(a, bool) or not isinstance(a, (int, np.integer)):
            raise TypeError(f"{op_name}: axis {a!r} is not an integer")
        if not -ndim <= a < ndim:
            raise ValueError(f"{op_name}: axis {a} is out of range for an input of ndim {ndim}")
        out.append(int(a) % ndim)
    if len(set(out)) != len(out):
        raise ValueError(f"{op_name}: repeated axis in {axes}")
    return tuple(sorted(out))


# -- views of axes: DimShuffle -------------------------------------------------------------------
class DimShuffle(Op):
    """Reorder, insert ('x') and drop (length-1) axes: transpose, expand_dims, squeeze."""

    __props__ = ("input_ndim", "new_order")
    view_map = {0: [0]}

    def __init__(self, input_ndim: int, new_order):
        new_order = tuple(new_order)
        kept = [d for d in new_order if d != "x"]
        if len(set(kept)) != len(kept) or any(not 0 <= d < input_ndim for d in kept):
            raise ValueError(f"DimShuffle: invalid order {new_order} for ndim {input_ndim}")
        self.input_ndim = input_ndim
        self.new_order = new_order
        self.kept = tuple(kept)
        self.dropped = tuple(d for d in range(input_ndim) if d not in kept)
        self.inserted = tuple(i for i, d in enumerate(new_order) if d == "x")

    def __repr__(self):
        return f"DimShuffle{{{','.join(str(d) for d in self.new_order)}}}"

    @property
    def is_transpose(self) -> bool:
        return not self.inserted and not self.dropped

    def make_node(self, x):
        x = as_tensor(x)
        if x.ndim != self.input_ndim:
            raise TypeError(f"{self}: expected an input of ndim {self.input_ndim}, got {x.ndim}")
        for d in self.dropped:
            if x.type.shape[d] not in (1, None):
                raise ValueError(
                    f"{self}: cannot drop axis {d} of length {x.type.shape[d]} from shape "
                    f"{shape_str(x.type.shape)}"
                )
        shape = tuple(1 if d == "x" else x.type.shape[d] for d in self.new_order)
        return Apply(self, [x], [x.type.clone(shape=shape)])

    def perform(self, node, inputs, outputs):
        (x,) = inputs
        for d in self.dropped:
            if x.shape[d] != 1:
                raise ValueError(
                    f"{self}: cannot drop axis {d} of length {x.shape[d]} (shape {x.shape})")
        res = x.reshape([x.shape[d] for d in range(x.ndim) if d not in self.dropped]) \
            if self.dropped else x
        order = [sorted(self.kept).index(d) for d in self.kept]
        res = res.transpose(order)
        res = res.reshape(tuple(1 if d == "x" else x.shape[d] for d in self.new_order))
        outputs[0][0] = res

    def infer_shape(self, fgraph, node, input_shapes):
        (shape,) = input_shapes
        one = constant(1, "int64")
        return [tuple(one if d == "x" else shape[d] for d in self.new_order)]

    def L_op(self, inputs, outputs, output_grads):
        (g,) = output_grads
        if self.inserted:
            g = g.sum(self.inserted)
        # now g has axes self.kept in that order; put them back and re-insert dropped axes
        order = []
        for d in range(self.input_ndim):
            order.append("x" if d in self.dropped else self.kept.index(d))
        return [dimshuffle(g, order)]


def dimshuffle(x, order) -> Variable:
    """`x` with its axes rearranged by `order` (ints and 'x' for new length-1 axes)."""
    x = as_tensor(x)
    order = tuple(order)
    if order == tuple(range(x.ndim)):
        return x
    return DimShuffle(x.ndim, order)(x)


def _normalize_axes(axes, ndim, op_name) -> tuple:
    if isinstance(axes, (int, np.integer)):
        axes = (axes,)
    out = []
    for a in axes:
        a = int(a)
        if not -ndim <= a < ndim:
            raise ValueError(f"{op_name}: axis {a} is out of range for ndim {ndim}")
        out.append(a % ndim)
    if len(set(out)) != len(out):
        raise ValueError(f"{op_name}: repeated axis in {tuple(axes)}")
    return tuple(out)


def transpose(x, axes=None) -> Variable:
    """Permute the axes of `x` (reverse them by default)."""
    x = as_tensor(x)
    if axes is None:
        axes = tuple(reversed(range(x.ndim)))
    axes = _normalize_axes(axes, x.ndim, "transpose")
    if sorted(axes) != list(range(x.ndim)):
        raise ValueError(f"transpose: axes {axes} are not a permutation of {x.ndim} axes")
    return dimshuffle(x, axes)


def expand_dims(x, axis) -> Variable:
    """Insert length-1 axes at positions `axis` of the result."""
    x = as_tensor(x)
    axis = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    out_ndim = x.ndim + len(axis)
    axis = _normalize_axes(axis, out_ndim, "expand_dims")
    order, it = [], iter(range(x.ndim))
    for i in range(out_ndim):
        order.append("x" if i in axis else next(it))
    return dimshuffle(x, order)


def squeeze(x, axis=None) -> Variable:
    """Drop length-1 axes: `axis`, or by default every one (then every length must be static:
    numpy's result would have a rank only known at run time)."""
    x = as_tensor(x)
    if axis is None:
        if None in x.type.shape:
            raise ValueError(f"squeeze: axis=None needs a static shape, got "
                             f"{shape_str(x.type.shape)}: give the axes to drop")
        axis = tuple(i for i, s in enumerate(x.type.shape) if s == 1)
    axis = _normalize_axes(axis, x.ndim, "squeeze")
    for a in axis:
        if x.type.shape[a] not in (1, None):
            raise ValueError(
                f"squeeze: axis {a} has length {x.type.shape[a]} in shape "
                f"{shape_str(x.type.shape)}")
    return dimshuffle(x, [i for i in range(x.ndim) if i not in axis])


# -- shape reads: Shape, ShapeI, MakeVector ------------------------------------------------------
class Shape(Op):
    """The shape of `x` as an int64 vector."""

    reads_shape_only = True

    def make_node(self, x):
        x = as_tensor(x)
        return Apply(self, [x], [TensorType(_INT, (x.ndim,))])

    def perform(self, node, inputs, outputs):
        outputs[0][0] = np.array(inputs[0].shape, dtype=_INT)

    def infer_shape(self, fgraph, node, input_shapes):
        return [(constant(node.inputs[0].ndim, _INT),)]

    def L_op(self, inputs, outputs, output_grads):
        return [None]


class ShapeI(Op):
    """Length of axis `i` of `x`, as a 0-d int64."""

    __props__ = ("i",)
    reads_shape_only = True

    def __init__(self, i: int):
        self.i = int(i)

    def make_node(self, x):
        x = as_tensor(x)
        if not 0 <= self.i < x.ndim:
            raise ValueError(f"{self}: axis {self.i} out of range for ndim {x.ndim}")
        return Apply(self, [x], [TensorType(_INT, ())])

    def perform(self, node, inputs, outputs):
        outputs[0][0] = np.array(inputs[0].shape[self.i], dtype=_INT)

    def infer_shape(self, fgraph, node, input_shapes):
        return [()]

    def L_op(self, inputs, outputs, output_grads):
        return [None]


class MakeVector(Op):
    """A vector made of 0-d inputs of one dtype."""

    __props__ = ("dtype",)
    runs_inline = True

    def __init__(self, dtype=_INT):
        self.dtype = np.dtype(dtype).name

    def make_node(self, *scalars):
        scalars = [as_tensor(s) for s in scalars]
        for k, s in enumerate(scalars):
            if s.ndim != 0:
                raise TypeError(f"{self}: input {k} has ndim {s.ndim}, expected a 0-d tensor")
            if not np.can_cast(s.dtype, self.dtype, "same_kind"):
                raise TypeError(f"{self}: input {k} of dtype {s.dtype} cannot become {self.dtype}")
        return Apply(self, scalars, [TensorType(self.dtype, (len(scalars),))])

    def perform(self, node, inputs, outputs):
        outputs[0][0] = np.array([np.asarray(v).item() for v in inputs], dtype=self.dtype)

    def infer_shape(self, fgraph, node, input_shapes):
        return [(constant(len(node.inputs), _INT),)]

    def L_op(self, inputs, outputs, output_grads):
        (g,) = output_grads
        return [g[k] if np.dtype(x.dtype).kind == "f" else None
                for k, x in enumerate(inputs)]


def shape(x):
    """The shape of `x` as an int64 vector variable (static dims become constants later)."""
    x = as_tensor(x)
    return Shape()(x)


def shape_i(x, i: int):
    """Length of axis `i` of `x`: a constant when statically known, else a 0-d variable."""
    x = as_tensor(x)
    i = int(i) % max(x.ndim, 1)
    static = x.type.shape[i]
    if static is not None:
        return constant(static, _INT)
    return ShapeI(i)(x)


def make_vector(values, dtype=_INT):
    """An int64 (by default) vector from ints and 0-d variables."""
    vars_ = [as_tensor(v if not isinstance(v, (int, np.integer)) else np.int64(v))
             for v in values]
    if all(isinstance(v, Constant) for v in vars_):
        return constant(np.array([v.data.item() for v in vars_], dtype=dtype))
    return MakeVector(dtype)(*vars_)


# -- joins: Join, concatenate, stack -------------------------------------------------------------
class Join(Op):
    """Concatenation of the inputs along `axis` (numpy dtype promotion)."""

    __props__ = ("axis",)

    def __init__(self, axis: int):
        self.axis = int(axis)

    def make_node(self, *xs):
        xs = [as_tensor(x) for x in xs]
        if not xs:
            raise ValueError(f"{self}: needs at least one array")
        ndim = xs[0].ndim
        shapes = ", ".join(shape_str(x.type.shape) for x in xs)
        if any(x.ndim != ndim for x in xs) or ndim == 0:
            raise ValueError(f"{self}: all inputs need the same ndim >= 1, got shapes {shapes}")
        if not 0 <= self.axis < ndim:
            raise ValueError(f"{self}: axis {self.axis} out of range for ndim {ndim}")
        out = []
        for a in range(ndim):
            dims = [x.type.shape[a] for x in xs]
            if a == self.axis:
                out.append(None if None in dims else sum(dims))
                continue
            known = {d for d in dims if d is not None}
            if len(known) > 1:
                raise ValueError(f"{self}: shapes {shapes} differ along axis {a}")
            out.append(known.pop() if known else None)
        dtype = np.result_type(*[np.dtype(x.dtype) for x in xs]).name
        return Apply(self, xs, [TensorType(dtype, tuple(out))])

    def perform(self, node, inputs, outputs):
        try:
            out = np.concatenate(inputs, axis=self.axis)
        except ValueError:
            raise ValueError(f"{self}: cannot join arrays of shapes "
                             f"{', '.join(str(x.shape) for x in inputs)}") from None
        outputs[0][0] = np.asarray(out, dtype=node.outputs[0].dtype)

    def infer_shape(self, fgraph, node, input_shapes):
        out = []
        for a, static in enumerate(node.outputs[0].type.shape):
            if static is not None:
                out.append(constant(static, _INT))
            elif a == self.axis:
                total = input_shapes[0][a]
                for s in input_shapes[1:]:
                    total = total + s[a]
                out.append(total)
            else:
                out.append(input_shapes[0][a])
        return [tuple(out)]

    def L_op(self, inputs, outputs, output_grads):
        (g,) = output_grads
        grads, start = [], 0
        for x in inputs:
            n = x.type.shape[self.axis]
            stop = start + (n if n is not None else shape_i(x, self.axis))
            if np.dtype(x.dtype).kind in "fc":
                piece = g[(slice(None),) * self.axis + (slice(start, stop),)]
                grads.append(piece.astype(x.dtype))
            else:
                grads.append(None)
            start = stop
        return grads


def concatenate(xs, axis: int = 0) -> Variable:
    """Join arrays along an existing axis."""
    xs = [as_tensor(x) for x in xs]
    if not xs:
        raise ValueError("concatenate: needs at least one array")
    if xs[0].ndim == 0:
        raise ValueError("concatenate: zero-dimensional arrays cannot be concatenated")
    (axis,) = normalize_axis(axis, xs[0].ndim, "concatenate")
    return Join(axis)(*xs)


def stack(xs, axis: int = 0) -> Variable:
    """Join arrays of one shape along a new axis."""
    xs = [as_tensor(x) for x in xs]
    if not xs:
        raise ValueError("stack: needs at least one array")
    if any(x.ndim != xs[0].ndim for x in xs):
        raise ValueError(f"stack: all inputs need the same shape, got "
                         f"{', '.join(shape_str(x.type.shape) for x in xs)}")
    for a in range(xs[0].ndim):  # stack needs equal shapes, not just broadcastable ones
        known = {x.type.shape[a] for x in xs} - {None}
        if len(known) > 1:
            raise ValueError(f"stack: all inputs need the same shape, got "
                             f"{', '.join(shape_str(x.type.shape) for x in xs)}")
    (axis,) = normalize_axis(axis, xs[0].ndim + 1, "stack")
    return Join(axis)(*[expand_dims(x, axis) for x in xs])
