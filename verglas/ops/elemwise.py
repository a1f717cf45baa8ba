"""Elemwise (a scalar op mapped over broadcast arrays), its weak-scalar typing (NEP 50) and the
gradient of broadcasting: `sum_to` and SumToShape."""

from __future__ import annotations

import numpy as np

from verglas.graph.basic import Apply, Variable
from verglas.graph.op import Op
from verglas.graph.types import TensorType
from verglas.ops.basic import as_tensor, constant, expand_dims, is_python_scalar, shape_str
from verglas.ops.scalar import Cast, Eq, ScalarOp, Second, Switch

__all__ = ["Elemwise", "elemwise", "broadcast_static_shape", "sum_to", "SumToShape",
           "sum_to_shape"]

_INT = "int64"


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
                # where(eq(other, 1), dim, other), from the scalar ops (math.py builds on this)
                dim = elemwise(Switch(), elemwise(Eq(), other, 1), dim, other)
            out.append(dim)
        return [tuple(out)] * len(node.outputs)

    def L_op(self, inputs, outputs, output_grads):
        output_grads = [elemwise(Second(), o, constant(np.asarray(0, o.dtype)))  # zeros_like
                        if g is None else g for o, g in zip(outputs, output_grads)]
        grads = self.scalar_op.grad(list(inputs), list(outputs), output_grads)
        result = []
        for x, g in zip(inputs, grads):
            if g is None:
                result.append(None)
                continue
            g = as_tensor(g)
            g = sum_to(g, x)
            if g.dtype != x.dtype:
                g = elemwise(Cast(x.dtype), g)
            result.append(g)
        return result


def sum_to(g: Variable, x: Variable) -> Variable:
    """Sum `g` (a broadcast result) back to the shape of `x`, at run time where needed."""
    if g.ndim > x.ndim:  # (g.sum: reductions build on this module)
        g = g.sum(tuple(range(g.ndim - x.ndim)))
    if g.ndim < x.ndim:
        raise ValueError(f"sum_to: gradient of ndim {g.ndim} for input of ndim {x.ndim}")
    static_axes = tuple(a for a, (xs, gs) in enumerate(zip(x.type.shape, g.type.shape))
                        if xs == 1 and gs != 1)
    if static_axes:
        g = g.sum(static_axes, keepdims=True)
    # a dimension unknown until run time may turn out to be 1 and broadcast: sum it then
    if any(xs is None and gs != 1 for xs, gs in zip(x.type.shape, g.type.shape)):
        g = sum_to_shape(g, x.shape, x.type.shape)
    return g


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
        shp = node.inputs[1]  # (shp[a]: indexing builds on this module)
        return [tuple(constant(s, _INT) if s is not None else shp[a]
                      for a, s in enumerate(self.static_shape))]

    def L_op(self, inputs, outputs, output_grads):
        g, _ = inputs
        return [elemwise(Second(), g, output_grads[0]), None]  # second(g, output_grad)


def sum_to_shape(g, shp, static_shape=None):
    """`g` summed over the axes where run-time shape `shp` is 1 (gradient of broadcasting)."""
    g = as_tensor(g)
    if static_shape is None:
        static_shape = (None,) * g.ndim
    static_shape = tuple(s if s is not None else (1 if gs == 1 else None)
                         for s, gs in zip(static_shape, g.type.shape))
    return SumToShape(static_shape)(g, shp)




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
