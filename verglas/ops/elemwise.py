"""Elemwise (a scalar op mapped over broadcast arrays) and DimShuffle (transpose / expand_dims /
squeeze as one view op)."""

from __future__ import annotations

import numpy as np

from verglas.graph.basic import Apply, Variable
from verglas.graph.op import Op
from verglas.graph.types import TensorType
from verglas.ops.scalar import ScalarOp
from verglas.ops.variable import as_tensor, constant, is_python_scalar

__all__ = ["Elemwise", "DimShuffle", "elemwise", "dimshuffle", "transpose", "expand_dims",
           "squeeze", "broadcast_static_shape", "sum_to", "shape_str"]


def shape_str(shape) -> str:
    inner = ", ".join("?" if s is None else str(s) for s in shape)
    return f"({inner},)" if len(shape) == 1 else f"({inner})"


def broadcast_static_shape(shapes, op_name: str) -> tuple:
    """numpy broadcasting of static shapes (None: unknown); ValueError naming the op if not."""
    ndim = max((len(s) for s in shapes), default=0)
    padded = [(1,) * (ndim - len(s)) + tuple(s) for s in shapes]
    out = []
    for axis in range(ndim):
        dims = [s[axis] for s in padded]
        known = {d for d in dims if d is not None and d != 1}
        if len(known) > 1:
            raise ValueError(
                f"{op_name}: shapes {', '.join(shape_str(s) for s in shapes)} cannot be "
                f"broadcast together (axis {axis})"
            )
        if known:
            out.append(known.pop())
        elif all(d == 1 for d in dims):
            out.append(1)
        else:  # ones and unknowns: known only at run time
            out.append(None)
    return tuple(out)


class Elemwise(Op):
    """`scalar_op` applied elementwise with numpy broadcasting (inputs of equal ndim).

    `inplace_pattern`: pairs `(output, input)`; each such output is written into that input's
    buffer (same dtype and shape), which the op then destroys. Only the inplace rewrite sets it.
    """

    __props__ = ("scalar_op", "inplace_pattern")

    def __init__(self, scalar_op: ScalarOp, inplace_pattern=()):
        if not isinstance(scalar_op, ScalarOp):
            raise TypeError(f"Elemwise: {scalar_op!r} is not a ScalarOp")
        self.scalar_op = scalar_op
        pattern = tuple((int(o), int(i)) for o, i in inplace_pattern)
        outs, ins = [o for o, _ in pattern], [i for _, i in pattern]
        if (len(set(outs)) != len(outs) or len(set(ins)) != len(ins)
                or any(not 0 <= o < scalar_op.nout for o in outs)
                or any(not 0 <= i < scalar_op.nin for i in ins)):
            raise ValueError(f"Elemwise: invalid inplace pattern {inplace_pattern!r} for "
                             f"{scalar_op}")
        self.inplace_pattern = pattern
        if pattern:  # an instance attribute: the class default stays the empty map
            self.destroy_map = {o: [i] for o, i in pattern}

    def __repr__(self):
        if self.inplace_pattern:
            marks = ",".join(f"{o}<-{i}" for o, i in self.inplace_pattern)
            return f"Elemwise{{{self.scalar_op}, inplace={marks}}}"
        return f"Elemwise{{{self.scalar_op}}}"

    def fingerprint_key(self):
        if self.inplace_pattern:
            return ("Elemwise", self.scalar_op.fingerprint_key(), self.inplace_pattern)
        return ("Elemwise", self.scalar_op.fingerprint_key())

    def make_node(self, *inputs):
        sop = self.scalar_op
        if len(inputs) != sop.nin:
            raise TypeError(f"{self}: expected {sop.nin} inputs, got {len(inputs)}")
        inputs = [as_tensor(i) for i in inputs]
        ndim = max((i.ndim for i in inputs), default=0)
        inputs = [expand_dims(i, tuple(range(ndim - i.ndim))) if i.ndim < ndim else i
                  for i in inputs]
        shape = broadcast_static_shape([i.type.shape for i in inputs], str(self))
        dtypes = sop.output_dtypes(*[i.dtype for i in inputs])
        for o, i in self.inplace_pattern:
            if inputs[i].dtype != dtypes[o]:
                raise TypeError(f"{self}: output {o} of dtype {dtypes[o]} cannot overwrite "
                                f"input {i} of dtype {inputs[i].dtype}")
        return Apply(self, inputs, [TensorType(d, shape) for d in dtypes])

    def perform(self, node, inputs, outputs):
        try:
            results = self.scalar_op.perform_arrays(*inputs)
        except ValueError as exc:
            if "broadcast" not in str(exc):
                raise
            raise ValueError(
                f"{self}: input shapes {', '.join(str(i.shape) for i in inputs)} cannot be "
                f"broadcast together"
            ) from None
        shape = np.broadcast_shapes(*[i.shape for i in inputs])
        for storage, res, var in zip(outputs, results, node.outputs):
            res = np.asarray(res)
            if res.dtype.name != var.dtype:
                res = res.astype(var.dtype)
            if res.shape != shape:
                res = np.broadcast_to(res, shape).copy()
            storage[0] = res
        for o, i in self.inplace_pattern:  # results are computed: now overwrite the inputs
            target = inputs[i]
            if target.shape != shape:
                raise ValueError(f"{self}: input {i} of shape {target.shape} cannot hold the "
                                 f"output of shape {shape}")
            target[...] = outputs[o][0]
            outputs[o][0] = target

    def infer_shape(self, fgraph, node, input_shapes):
        from verglas.ops import math as m

        out = []
        for axis, static in enumerate(node.outputs[0].type.shape):
            if static is not None:
                out.append(constant(static, "int64"))
                continue
            dims = [s[axis] for s, i in zip(input_shapes, node.inputs)
                    if i.type.shape[axis] != 1]
            if not dims:
                out.append(constant(1, "int64"))
                continue
            dim = dims[0]
            for other in dims[1:]:  # numpy: a 1 broadcasts against anything, including 0
                dim = m.where(m.eq(other, 1), dim, other)
            out.append(dim)
        return [tuple(out)] * len(node.outputs)

    def L_op(self, inputs, outputs, output_grads):
        from verglas.ops import math as m

        output_grads = [m.zeros_like(o) if g is None else g
                         for o, g in zip(outputs, output_grads)]
        grads = self.scalar_op.grad(list(inputs), list(outputs), output_grads)
        result = []
        for x, g in zip(inputs, grads):
            if g is None:
                result.append(None)
                continue
            g = as_tensor(g)
            g = sum_to(g, x)
            if g.dtype != x.dtype:
                g = m.cast(g, x.dtype)
            result.append(g)
        return result


def sum_to(g: Variable, x: Variable) -> Variable:
    """Sum `g` (a broadcast result) back to the shape of `x`, at run time where needed."""
    from verglas.ops import reduce as r
    from verglas.ops import shape as sh

    if g.ndim > x.ndim:
        g = r.sum(g, tuple(range(g.ndim - x.ndim)))
    if g.ndim < x.ndim:
        raise ValueError(f"sum_to: gradient of ndim {g.ndim} for input of ndim {x.ndim}")
    static_axes = tuple(a for a, (xs, gs) in enumerate(zip(x.type.shape, g.type.shape))
                        if xs == 1 and gs != 1)
    if static_axes:
        g = r.sum(g, static_axes, keepdims=True)
    # a dimension unknown until run time may turn out to be 1 and broadcast: sum it then
    if any(xs is None and gs != 1 for xs, gs in zip(x.type.shape, g.type.shape)):
        g = sh.sum_to_shape(g, sh.shape(x), x.type.shape)
    return g


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
        from verglas.ops import reduce as r

        (g,) = output_grads
        if self.inserted:
            g = r.sum(g, self.inserted)
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


def elemwise(scalar_op: ScalarOp, *args) -> Variable | list:
    """Apply `scalar_op` elementwise; Python scalars are weak (NEP 50): they take the dtype the
    array operands give them."""
    if all(isinstance(a, Variable) for a in args):
        return Elemwise(scalar_op)(*args)
    # arrays (numpy's, lists) are strong operands like variables: they type the weak scalars
    args = [a if isinstance(a, Variable) or is_python_scalar(a) else as_tensor(a) for a in args]
    typing = scalar_op.typing_inputs
    tensor_dtypes = [np.dtype(a.dtype) for k, a in enumerate(args) if isinstance(a, Variable)
                     and (typing is None or k in typing)]
    loop = _loop_dtypes(scalar_op, args) if tensor_dtypes else None
    converted = []
    for k, a in enumerate(args):
        if isinstance(a, Variable):
            converted.append(a)
        elif is_python_scalar(a) and tensor_dtypes:
            dtype = None if loop is None else loop[k]
            converted.append(constant(_weak_scalar(a, tensor_dtypes, scalar_op, dtype), None))
        else:
            converted.append(as_tensor(a))
    return Elemwise(scalar_op)(*converted)


def _loop_dtypes(scalar_op, args):
    """The input dtypes of the numpy loop that `scalar_op`'s ufunc picks for `args` (Python
    scalars weak), or None when the op has no ufunc or numpy finds no loop."""
    ufunc = scalar_op.ufunc
    if ufunc is None:
        return None
    given = []
    for a in args:
        if isinstance(a, Variable):
            given.append(np.dtype(a.dtype))
        elif isinstance(a, bool) or not is_python_scalar(a):
            given.append(np.asarray(a).dtype)
        else:
            given.append(type(a) if type(a) in (int, float, complex) else np.asarray(a).dtype)
    try:
        return ufunc.resolve_dtypes(tuple(given) + (None,) * ufunc.nout)[:ufunc.nin]
    except (TypeError, ValueError):  # no loop: make_node reports it, naming the op
        return None


def _weak_scalar(value, dtypes, scalar_op=None, dtype=None):
    """The numpy scalar a weak Python scalar becomes next to arrays of `dtypes` (NEP 50), or in
    numpy's loop of input `dtype` when known (true_divide(uint8, -1) computes in float64)."""
    dtype = np.result_type(*dtypes, value) if dtype is None else np.dtype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        if not info.min <= value <= info.max:
            if not getattr(scalar_op, "comparison", False):
                raise OverflowError(f"Python integer {value} out of bounds for {dtype}")
            # numpy 2 compares an out-of-range Python int exactly (x_int8 == 1000 is False):
            # give the constant a dtype that holds it
            strong = np.asarray(value).dtype
            dtype = np.result_type(dtype, strong) if strong.kind != "O" else np.dtype("float64")
    return np.asarray(value, dtype=dtype)
