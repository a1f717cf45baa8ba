"""Symbolic buffer shapes: one frozen "shape graph" from input shapes to every buffer's dims.

Built from each op's `infer_shape`. Because the shape graph is frozen (interned), two buffers
whose sizes are computed the same way hold the very same size variable, which is what the
memory plan compares.
"""

from __future__ import annotations

import copy

import numpy as np

from verglas import rewrite  # (a module: rewrite_graph is looked up at each call)
from verglas.graph.basic import Constant
from verglas.graph.fg import FunctionGraph
from verglas.graph.frozen import freeze
from verglas.graph.reference import ReferenceRunner
from verglas.ops import math as m
from verglas.ops.basic import Shape, ShapeI, as_tensor, constant

__all__ = ["ShapeTable"]


class ShapeTable:
    """Symbolic shape and size of every buffer of a program, evaluable from input shapes."""

    def __init__(self, graph, variables, input_names=()):
        self.input_names = tuple(input_names)
        self._nominal_index = {v: k for k, v in enumerate(graph.inputs)}
        shapes: dict = {}
        for var in graph.inputs:
            shapes[var] = tuple(constant(s, "int64") if s is not None else ShapeI(a)(var)
                                for a, s in enumerate(var.type.shape))

        def of(var):
            if var not in shapes:  # constants
                shapes[var] = tuple(constant(s, "int64") for s in var.data.shape)
            return shapes[var]

        for node in graph.toposort():
            in_shapes = [of(v) for v in node.inputs]
            try:
                out_shapes = node.op.infer_shape(None, node, in_shapes)
            except NotImplementedError:
                out_shapes = [tuple(ShapeI(a)(o) for a in range(o.ndim)) for o in node.outputs]
            for out, dims in zip(node.outputs, out_shapes):
                dims = tuple(dims)
                if len(dims) != out.ndim:
                    raise ValueError(f"{node.op}.infer_shape gave {len(dims)} dims for an "
                                     f"output of ndim {out.ndim}")
                fixed = []
                for static, dim in zip(out.type.shape, dims):
                    if static is not None:
                        fixed.append(constant(static, "int64"))
                    else:
                        dim = as_tensor(dim)
                        fixed.append(dim if dim.dtype == "int64" else m.cast(dim, "int64"))
                shapes[out] = tuple(fixed)
        for var in graph.outputs:
            of(var)
        self.variables = list(variables)
        dims, sizes = [], []
        for var in self.variables:
            d = of(var)
            dims.extend(d)
            sizes.append(_product(d))
        self._ndims = [v.ndim for v in self.variables]
        self.graph = _simplified(list(graph.inputs), dims + sizes)
        n_dims = len(dims)
        self.dims = self.graph.outputs[:n_dims]
        self.sizes = self.graph.outputs[n_dims:]
        self._offsets = np.cumsum([0] + self._ndims).tolist()
        self._value_free = _shape_only(self.graph)
        self._runner = None

    def with_input_names(self, names) -> ShapeTable:
        """This table with `names` for the inputs when printing (self when they are its own)."""
        names = tuple(names)
        if names == self.input_names:
            return self
        table = copy.copy(self)
        table.input_names = names
        return table

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_runner"] = None  # rebuilt on first use
        state.pop("_wanted", None)
        return state

    def dims_of(self, index: int) -> tuple:
        """Symbolic dims of variable number `index`."""
        return self.dims[self._offsets[index]:self._offsets[index + 1]]

    def size_of(self, index: int):
        """Symbolic element count of variable number `index` (an interned variable)."""
        return self.sizes[index]

    def depends_on_values(self, index: int) -> bool:
        return not all(d in self._value_free for d in self.dims_of(index))

    def evaluate(self, input_shapes) -> list[tuple[int, ...] | None]:
        """Concrete shapes for the given input shapes (None where values are needed)."""
        if self._runner is None:
            wanted = [d for d in self.dims if d in self._value_free]
            self._wanted = wanted
            self._runner = ReferenceRunner(freeze(list(self.graph.inputs), wanted))
        dummies = [np.broadcast_to(np.zeros((), v.type.dtype), tuple(s))
                   for v, s in zip(self.graph.inputs, input_shapes)]
        values = dict(zip(self._wanted, self._runner(dummies)))
        result = []
        for k in range(len(self.variables)):
            dims = self.dims_of(k)
            if all(d in values for d in dims):
                result.append(tuple(int(values[d]) for d in dims))
            else:
                result.append(None)
        return result

    # -- printing ------------------------------------------------------------------------------
    def shape_str(self, index: int) -> str:
        dims = [self.dim_str(d) for d in self.dims_of(index)]
        return "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"

    def dim_str(self, var, depth: int = 0) -> str:
        if isinstance(var, Constant):
            data = var.data
            # (a dim's expression may hold an array constant: the scan's initial state)
            return str(data.item()) if data.size == 1 else f"const{data.shape}"

        node = var.owner
        if node is None:
            return "?"
        op = node.op
        if isinstance(op, ShapeI) and node.inputs[0] in self._nominal_index:
            k = self._nominal_index[node.inputs[0]]
            name = self.input_names[k] if k < len(self.input_names) else f"in{k}"
            return f"{name}.shape[{op.i}]"
        if depth > 2:
            return "…"
        name = getattr(getattr(op, "scalar_op", None), "name", type(op).__name__)
        return f"{name}({', '.join(self.dim_str(i, depth + 1) for i in node.inputs)})"


def _simplified(inputs, outputs):
    """The shape graph, simplified by the rewrite pipeline (so equal dims become one object)."""
    fgraph = FunctionGraph(inputs, outputs, clone=True)
    rewrite.rewrite_graph(fgraph, rewrite.get_mode("fast_run").excluding("fusion", "inplace"))
    return fgraph.freeze()


def _product(dims):
    static = 1
    symbolic = []
    for d in dims:
        if isinstance(d, Constant):
            static *= int(d.data)
        else:
            symbolic.append(d)
    if not symbolic:
        return constant(static, "int64")
    out = symbolic[0]
    for d in symbolic[1:]:
        out = m.mul(out, d)
    return m.mul(out, constant(static, "int64")) if static != 1 else out


def _shape_only(graph) -> set:
    """Variables of the shape graph computable from input shapes alone (no input values)."""
    ok: set = set()

    def known(v):
        return isinstance(v, Constant) or v in ok

    for node in graph.toposort():
        if isinstance(node.op, (Shape, ShapeI)) or all(known(i) for i in node.inputs):
            ok.update(node.outputs)
    ok.update(v for v in graph.outputs if isinstance(v, Constant))
    return ok
