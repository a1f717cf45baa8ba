"""Arrays of a new shape: Reshape (reshape), Alloc (broadcast_to, full, zeros, ones) and ARange.

(Reading shapes, Shape / ShapeI / MakeVector, and joining, Join, are in basic.py.)"""

from __future__ import annotations

import numpy as np

from verglas.graph.basic import Apply, Constant, Variable
from verglas.graph.op import Op
from verglas.graph.types import TensorType
from verglas.ops import math as m
from verglas.ops.basic import MakeVector, Shape, as_tensor, constant, make_vector, shape, shape_str
from verglas.ops.elemwise import sum_to
from verglas.ops.indexing import getitem

__all__ = ["Reshape", "Alloc", "ARange", "reshape", "alloc", "broadcast_to", "full", "zeros",
           "ones", "arange"]

_INT = "int64"


def _static_int(var):
    """The Python int value of a 0-d integer variable when it is a constant, else None."""
    if isinstance(var, Constant) and var.ndim == 0:
        return int(var.data)
    return None


def _static_entries(shp) -> tuple:
    """Entries of an int vector variable known at construction (ints or None)."""
    if isinstance(shp, Constant):
        return tuple(int(v) for v in shp.data)
    if shp.owner is not None and isinstance(shp.owner.op, MakeVector):
        return tuple(_static_int(v) for v in shp.owner.inputs)
    if shp.owner is not None and isinstance(shp.owner.op, Shape):
        return shp.owner.inputs[0].type.shape
    return (None,) * shp.type.shape[0]


def _as_shape_scalars(shape, op_name: str) -> list:
    """A shape (int, tuple of ints / 0-d int variables, or an int vector) as 0-d int64 variables."""
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (shape,)
    if isinstance(shape, Variable):
        shape = as_tensor(shape)
        if shape.ndim == 0:
            shape = (shape,)
        elif shape.ndim == 1 and shape.type.shape[0] is not None:
            if isinstance(shape, Constant):
                shape = tuple(int(v) for v in shape.data)
            elif shape.owner is not None and isinstance(shape.owner.op, MakeVector):
                shape = tuple(shape.owner.inputs)
            else:
                shape = tuple(getitem(shape, i) for i in range(shape.type.shape[0]))
        else:
            raise TypeError(f"{op_name}: shape {shape!r} of type {shape.type} must be a "
                            f"vector of static length")
    out = []
    for k, d in enumerate(shape):
        if isinstance(d, bool) or (not isinstance(d, (int, np.integer, Variable))):
            raise TypeError(f"{op_name}: shape entry {k} is {d!r}, not an integer")
        if isinstance(d, Variable):
            d = as_tensor(d)
            if d.ndim != 0 or np.dtype(d.dtype).kind not in "iu":
                raise TypeError(f"{op_name}: shape entry {k} has type {d.type}, expected a 0-d "
                                f"integer")
            if d.dtype != _INT:
                d = m.cast(d, _INT)
            out.append(d)
        else:
            out.append(constant(int(d), _INT))
    return out


class Reshape(Op):
    """`x` with a new shape given as an int64 vector (one entry may be -1); a view when possible."""

    __props__ = ("ndim",)
    view_map = {0: [0]}

    def __init__(self, ndim: int):
        self.ndim = int(ndim)

    def make_node(self, x, shp):
        x, shp = as_tensor(x), as_tensor(shp)
        if shp.ndim != 1 or np.dtype(shp.dtype).kind not in "iu" \
                or shp.type.shape[0] not in (None, self.ndim):
            raise TypeError(f"{self}: the shape must be an integer vector of length {self.ndim}, "
                            f"got {shp.type}")
        entries = _static_entries(shp) if shp.type.shape[0] is not None else (None,) * self.ndim
        if sum(1 for e in entries if e == -1) > 1:
            raise ValueError(f"{self}: more than one -1 in the new shape {entries}")
        if any(e is not None and e < -1 for e in entries):
            raise ValueError(f"{self}: negative dimension in the new shape {entries}")
        size = None
        if all(s is not None for s in x.type.shape):
            size = int(np.prod(x.type.shape, dtype=_INT))
        out = list(e if e is None or e >= 0 else None for e in entries)
        known = [e for e in entries if e is not None and e != -1]
        if size is not None and None not in entries:
            rest = int(np.prod(known, dtype=_INT))
            if -1 in entries:
                if rest == 0 or size % rest:
                    raise ValueError(f"{self}: cannot reshape shape {shape_str(x.type.shape)} "
                                     f"into {shape_str(entries)}")
                out[entries.index(-1)] = size // rest
            elif rest != size:
                raise ValueError(f"{self}: cannot reshape shape {shape_str(x.type.shape)} "
                                 f"(size {size}) into {shape_str(entries)}")
        return Apply(self, [x, shp], [x.type.clone(shape=tuple(out))])

    def perform(self, node, inputs, outputs):
        x, shp = inputs
        try:
            outputs[0][0] = np.reshape(x, tuple(int(s) for s in shp))
        except ValueError:
            raise ValueError(f"{self}: cannot reshape an array of shape {x.shape} into "
                             f"{tuple(int(s) for s in shp)}") from None

    def infer_shape(self, fgraph, node, input_shapes):
        x, shp = node.inputs
        out = []
        entries = _static_entries(shp)
        for k, static in enumerate(node.outputs[0].type.shape):
            if static is not None:
                out.append(constant(static, _INT))
            elif entries[k] == -1:  # size of x over the product of the other entries
                size = constant(1, _INT)
                for d in input_shapes[0]:
                    size = size * d
                rest = constant(1, _INT)
                for j in range(self.ndim):
                    if j != k:
                        rest = rest * getitem(shp, j)
                out.append(size // rest)
            else:
                out.append(getitem(shp, k))
        return [tuple(out)]

    def L_op(self, inputs, outputs, output_grads):
        (x, _), (g,) = inputs, output_grads
        return [reshape(g, shape(x)), None]


def reshape(x, newshape) -> Variable:
    """`x` with shape `newshape` (ints, 0-d int variables or an int vector; one -1 allowed)."""
    x = as_tensor(x)
    if isinstance(newshape, Variable) and newshape.ndim == 1:
        if newshape.type.shape[0] is None:
            raise TypeError(f"reshape: the shape vector {newshape!r} needs a static length")
        if np.dtype(newshape.dtype).kind not in "iu":
            raise TypeError(f"reshape: the shape vector {newshape!r} is not of integers")
        if _static_entries(newshape) == x.type.shape and None not in x.type.shape:
            return x
        return Reshape(newshape.type.shape[0])(x, newshape)
    dims = _as_shape_scalars(newshape, "reshape")
    if len(dims) == x.ndim and all(_static_int(d) == s for d, s in zip(dims, x.type.shape)):
        return x
    return Reshape(len(dims))(x, make_vector(dims))


class Alloc(Op):
    """`value` broadcast (numpy rules) to the shape given by 0-d int64 inputs; a fresh array."""

    def make_node(self, value, *dims):
        value = as_tensor(value)
        dims = [as_tensor(d) for d in dims]
        for k, d in enumerate(dims):
            if d.ndim != 0 or d.dtype != _INT:
                raise TypeError(f"Alloc: dimension {k} has type {d.type}, expected 0-d int64")
        if value.ndim > len(dims):
            raise ValueError(f"Alloc: value of shape {shape_str(value.type.shape)} has more "
                             f"dimensions than the target ({len(dims)})")
        static = [_static_int(d) for d in dims]
        if any(s is not None and s < 0 for s in static):
            raise ValueError(f"Alloc: negative dimension in {static}")
        padded = (1,) * (len(dims) - value.ndim) + value.type.shape
        out = []
        for s, v in zip(static, padded):
            if s is not None and v is not None and v != 1 and v != s:
                raise ValueError(f"Alloc: cannot broadcast a value of shape "
                                 f"{shape_str(value.type.shape)} to {shape_str(static)}")
            out.append(s if s is not None else (v if v != 1 else None))
        return Apply(self, [value, *dims], [value.type.clone(shape=tuple(out))])

    def perform(self, node, inputs, outputs):
        value, *dims = inputs
        target = tuple(int(d) for d in dims)
        try:
            outputs[0][0] = np.array(np.broadcast_to(value, target), copy=True)
        except ValueError:
            raise ValueError(f"Alloc: cannot broadcast a value of shape {value.shape} to "
                             f"{target}") from None

    def infer_shape(self, fgraph, node, input_shapes):
        return [tuple(node.inputs[1:])]

    def L_op(self, inputs, outputs, output_grads):
        value, *dims = inputs
        if np.dtype(value.dtype).kind not in "fc":
            return [None] * len(inputs)
        return [sum_to(output_grads[0], value), *[None] * len(dims)]


def alloc(value, shape) -> Variable:
    """`value` broadcast to `shape` (a new array)."""
    return Alloc()(as_tensor(value), *_as_shape_scalars(shape, "Alloc"))


def broadcast_to(x, shape) -> Variable:
    """`x` broadcast to `shape` with numpy's rules."""
    x = as_tensor(x)
    dims = _as_shape_scalars(shape, "broadcast_to")
    if x.ndim > len(dims):
        raise ValueError(f"broadcast_to: cannot broadcast shape {shape_str(x.type.shape)} to "
                         f"{len(dims)} dimensions")
    return Alloc()(x, *dims)


def full(shape, fill_value, dtype=None) -> Variable:
    """An array of `shape` filled with `fill_value` (dtype of the value unless given)."""
    if isinstance(fill_value, Variable):
        value = as_tensor(fill_value)
        dtype = value.dtype if dtype is None else np.dtype(dtype).name
        return alloc(m.cast(value, dtype), shape)
    if dtype is None:  # Python ints are int64 (where it holds them), as numpy on 64-bit Linux
        is_int = isinstance(fill_value, int) and not isinstance(fill_value, bool)
        dtype = _INT if is_int and -2**63 <= fill_value < 2**63 else \
            np.asarray(fill_value).dtype
    return alloc(constant(np.asarray(fill_value, dtype=dtype)), shape)


def zeros(shape, dtype="float64") -> Variable:
    """An array of zeros."""
    return full(shape, 0, dtype)


def ones(shape, dtype="float64") -> Variable:
    """An array of ones."""
    return full(shape, 1, dtype)


class ARange(Op):
    """Evenly spaced values in [start, stop) with `step`, as numpy.arange."""

    __props__ = ("dtype",)

    def __init__(self, dtype):
        self.dtype = np.dtype(dtype).name

    def make_node(self, start, stop, step):
        args = [as_tensor(a) for a in (start, stop, step)]
        for name, a in zip(("start", "stop", "step"), args):
            if a.ndim != 0 or np.dtype(a.dtype).kind not in "iuf":
                raise TypeError(f"{self}: {name} has type {a.type}, expected a 0-d number")
        length = None
        if all(isinstance(a, Constant) for a in args):
            start_v, stop_v, step_v = (a.data.item() for a in args)
            if step_v == 0:
                raise ValueError(f"{self}: step is zero")
            length = len(np.arange(start_v, stop_v, step_v, dtype=self.dtype))
        return Apply(self, args, [TensorType(self.dtype, (length,))])

    def perform(self, node, inputs, outputs):
        start, stop, step = (np.asarray(a).item() for a in inputs)
        if step == 0:
            raise ValueError(f"{self}: step is zero")
        outputs[0][0] = np.arange(start, stop, step, dtype=self.dtype)

    def infer_shape(self, fgraph, node, input_shapes):
        static = node.outputs[0].type.shape[0]
        if static is not None:
            return [(constant(static, _INT),)]
        start, stop, step = (m.cast(a, "float64") for a in node.inputs)
        return [(m.cast(m.maximum(m.ceil((stop - start) / step), 0), _INT),)]

    def L_op(self, inputs, outputs, output_grads):
        return [None, None, None]


def arange(start, stop=None, step=1, dtype=None) -> Variable:
    """numpy.arange with constant or 0-d symbolic bounds (a static length when constant)."""
    if stop is None:
        start, stop = 0, start
    args = [as_tensor(a) for a in (start, stop, step)]
    if dtype is None:
        dtype = np.result_type(*[np.dtype(a.dtype) for a in args]).name
    return ARange(dtype)(*args)
