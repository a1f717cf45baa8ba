"""Shape ops: reading shapes (Shape, ShapeI), building shape vectors (MakeVector) and summing a
broadcast gradient back to a run-time shape (SumToShape)."""

from __future__ import annotations

import numpy as np

from verglas.graph.basic import Apply, Constant
from verglas.graph.op import Op
from verglas.graph.types import TensorType
from verglas.ops.variable import as_tensor, constant

__all__ = ["Shape", "ShapeI", "MakeVector", "SumToShape", "shape", "shape_i", "make_vector",
           "sum_to_shape"]

_INT = "int64"


class Shape(Op):
    """The shape of `x` as an int64 vector."""

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
        from verglas.ops.indexing import getitem

        (g,) = output_grads
        return [getitem(g, k) if np.dtype(x.dtype).kind == "f" else None
                for k, x in enumerate(inputs)]


class SumToShape(Op):
    """Sum `g` over the axes where the run-time `shape` is 1 (undoes numpy broadcasting)."""

    __props__ = ("static_shape",)

    def __init__(self, static_shape):
        self.static_shape = tuple(static_shape)

    def make_node(self, g, shp):
        g, shp = as_tensor(g), as_tensor(shp)
        if shp.ndim != 1 or shp.type.shape[0] not in (None, g.ndim):
            raise ValueError(f"{self}: shape vector of type {shp.type} for an input of ndim "
                             f"{g.ndim}")
        if len(self.static_shape) != g.ndim:
            raise ValueError(f"{self}: static shape {self.static_shape} for ndim {g.ndim}")
        return Apply(self, [g, shp], [TensorType(g.dtype, self.static_shape)])

    def perform(self, node, inputs, outputs):
        g, shp = inputs
        axes = tuple(a for a, (n, m) in enumerate(zip(shp, g.shape)) if n == 1 and m != 1)
        for a, (n, m) in enumerate(zip(shp, g.shape)):
            if n != m and n != 1:
                raise ValueError(f"{self}: cannot reduce shape {g.shape} to {tuple(shp)}")
        out = g.sum(axis=axes, keepdims=True, dtype=g.dtype) if axes else g.copy()
        outputs[0][0] = out

    def infer_shape(self, fgraph, node, input_shapes):
        from verglas.ops.indexing import getitem

        shp = node.inputs[1]
        return [tuple(constant(s, _INT) if s is not None else getitem(shp, a)
                      for a, s in enumerate(self.static_shape))]

    def L_op(self, inputs, outputs, output_grads):
        from verglas.ops.math import second

        g, _ = inputs
        return [second(g, output_grads[0]), None]


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


def sum_to_shape(g, shp, static_shape=None):
    """`g` summed over the axes where run-time shape `shp` is 1 (gradient of broadcasting)."""
    g = as_tensor(g)
    if static_shape is None:
        static_shape = (None,) * g.ndim
    static_shape = tuple(s if s is not None else (1 if gs == 1 else None)
                         for s, gs in zip(static_shape, g.type.shape))
    return SumToShape(static_shape)(g, shp)
