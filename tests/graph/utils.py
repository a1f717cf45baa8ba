"""Toy types and ops for graph tests: the IR is tested without the array language."""

from __future__ import annotations

import numpy as np

from verglas.graph import (Apply, Constant, FrozenFunctionGraph, FunctionGraph, Op, TensorType,
                           Variable)

__all__ = ["Elemwise", "add", "mul", "sub", "sin", "exp", "neg", "Cast", "Split",
           "split", "InplaceAdd", "inplace_add", "View", "view", "Inner", "vector", "scalar",
           "matrix", "const", "FLOAT_VECTOR", "FLOAT_SCALAR", "build_random_graph"]

FLOAT_VECTOR = TensorType("float64", (None,))
FLOAT_SCALAR = TensorType("float64", ())


def vector(name: str | None = None, dtype: str = "float64") -> Variable:
    """A fresh root variable of type vector(dtype)."""
    return TensorType(dtype, (None,)).make_variable(name)


def scalar(name: str | None = None, dtype: str = "float64") -> Variable:
    """A fresh 0-d root variable."""
    return TensorType(dtype, ()).make_variable(name)


def matrix(name: str | None = None, dtype: str = "float64") -> Variable:
    """A fresh 2-d root variable."""
    return TensorType(dtype, (None, None)).make_variable(name)


def const(value, dtype: str = "float64") -> Constant:
    """A Constant holding `value` as an array of `dtype`."""
    arr = np.asarray(value, dtype=dtype)
    return Constant(TensorType(dtype, arr.shape), arr)


class Elemwise(Op):
    """A toy elementwise op: all inputs must share one dtype and one ndim."""

    __props__ = ("name", "nin")
    _impls = {"add": np.add, "mul": np.multiply, "sub": np.subtract, "sin": np.sin,
              "exp": np.exp, "neg": np.negative}

    def __init__(self, name: str, nin: int):
        self.name = name
        self.nin = nin

    def make_node(self, *inputs):
        if len(inputs) != self.nin:
            raise TypeError(f"{self}: expected {self.nin} inputs, got {len(inputs)}")
        for i, var in enumerate(inputs):
            if not isinstance(var, Variable) or not isinstance(var.type, TensorType):
                raise TypeError(f"{self}: input {i} is not a tensor variable: {var!r}")
        types = [v.type for v in inputs]
        if len({(t.dtype, t.ndim) for t in types}) > 1:
            raise TypeError(f"{self}: incompatible input types {[str(t) for t in types]}")
        shape = []
        for dims in zip(*(t.shape for t in types)):
            known = {s for s in dims if s is not None}
            if len(known) > 1:
                raise ValueError(f"{self}: static shapes {[t.shape for t in types]} differ")
            shape.append(known.pop() if known else None)
        return Apply(self, inputs, [TensorType(types[0].dtype, shape)])

    def perform(self, node, inputs, outputs):
        outputs[0][0] = np.asarray(self._impls[self.name](*inputs))

    def __str__(self):
        return self.name


add, mul, sub = Elemwise("add", 2), Elemwise("mul", 2), Elemwise("sub", 2)
sin, exp, neg = Elemwise("sin", 1), Elemwise("exp", 1), Elemwise("neg", 1)


class Cast(Op):
    """Change the dtype of a tensor."""

    __props__ = ("dtype",)

    def __init__(self, dtype: str):
        self.dtype = dtype

    def make_node(self, x):
        return Apply(self, [x], [x.type.clone(dtype=self.dtype)])

    def __str__(self):
        return f"cast{{{self.dtype}}}"


class Split(Op):
    """Two outputs: (x, -x); exercises multi-output nodes."""

    def make_node(self, x):
        return Apply(self, [x], [x.type, x.type])

    def __str__(self):
        return "split"


split = Split()


class InplaceAdd(Op):
    """add that overwrites its first input."""

    destroy_map = {0: [0]}

    def make_node(self, x, y):
        return Apply(self, [x, y], [x.type])

    def __str__(self):
        return "add_inplace"


inplace_add = InplaceAdd()


class View(Op):
    """Returns a view of its input."""

    view_map = {0: [0]}

    def make_node(self, x):
        return Apply(self, [x], [x.type])

    def __str__(self):
        return "view"


view = View()


class Inner(Op):
    """A toy inner-graph op: applies a frozen graph (its only prop) to its inputs."""

    __props__ = ("fgraph",)

    def __init__(self, fgraph: FrozenFunctionGraph):
        self.fgraph = fgraph

    @classmethod
    def from_vars(cls, inputs, outputs, dedup_nodes: bool = True) -> Inner:
        """The op computing `outputs` from `inputs`."""
        return cls(FunctionGraph(inputs, outputs).freeze(dedup_nodes=dedup_nodes))

    def make_node(self, *inputs):
        want = [v.type for v in self.fgraph.inputs]
        got = [v.type for v in inputs]
        if want != got:
            raise TypeError(f"Inner: expected input types {want}, got {got}")
        return Apply(self, inputs, [o.type for o in self.fgraph.outputs])

    def __str__(self):
        return f"Inner{{{len(self.fgraph.toposort())} nodes}}"


def build_random_graph(recipe, n_inputs: int = 3):
    """Build (inputs, outputs) from a recipe: a list of (op name, input picks) steps.

    Each pick indexes (modulo) the variables built so far, inputs first; the outputs are the
    last two variables. Calling it twice gives two structurally identical, distinct graphs.
    """
    ops = {"add": add, "mul": mul, "sub": sub, "sin": sin, "exp": exp, "neg": neg}
    inputs = [vector(f"x{i}") for i in range(n_inputs)]
    values = list(inputs)
    for name, picks in recipe:
        op = ops[name]
        args = [values[p % len(values)] for p in picks[: op.nin]]
        if len(args) < op.nin:
            args += [values[-1]] * (op.nin - len(args))
        values.append(op(*args))
    return inputs, values[-2:]
