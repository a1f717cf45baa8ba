"""Composite: a fused scalar graph (frozen), the scalar op that elementwise fusion produces.

`Elemwise(Composite(graph))` is one fused loop. Its props are the frozen scalar graph, so two
Composites of the same computation are equal in O(1), whatever their size.
"""

from __future__ import annotations

import numpy as np

from verglas.graph.basic import Apply, Constant, Variable
from verglas.graph.frozen import FrozenFunctionGraph, freeze
from verglas.graph.types import ScalarType
from verglas.ops.scalar import ScalarOp

__all__ = ["Composite", "scalar_variable", "scalar_apply"]


def scalar_variable(dtype: str, name=None) -> Variable:
    """A fresh scalar variable (input of a scalar graph)."""
    return Variable(ScalarType(dtype), None, None, name)


class Composite(ScalarOp):
    """A scalar op defined by a frozen graph of scalar ops (inputs and outputs ScalarType)."""

    __props__ = ("fgraph",)

    def __init__(self, fgraph: FrozenFunctionGraph):
        if not isinstance(fgraph, FrozenFunctionGraph):
            raise TypeError(f"Composite: expected a FrozenFunctionGraph, got {fgraph!r}")
        for node in fgraph.toposort():
            if not isinstance(node.op, ScalarOp):
                raise TypeError(f"Composite: inner node {node.op} is not a scalar op")
        self.fgraph = fgraph
        self.nin = len(fgraph.inputs)
        self.nout = len(fgraph.outputs)
        self._out_dtypes = tuple(o.type.dtype for o in fgraph.outputs)
        self._in_dtypes = tuple(i.type.dtype for i in fgraph.inputs)

    @classmethod
    def from_variables(cls, inputs, outputs) -> Composite:
        """The Composite computing scalar `outputs` from scalar `inputs`."""
        return cls(freeze(inputs, outputs))

    @property
    def name(self) -> str:
        return "composite"

    def __getstate__(self):
        return {"fgraph": self.fgraph}

    def __setstate__(self, state):
        self.__init__(state["fgraph"])

    def output_dtypes(self, *dtypes):
        if tuple(dtypes) != self._in_dtypes:
            raise TypeError(f"{self}: inputs of dtypes {dtypes}, its graph takes "
                            f"{self._in_dtypes}")
        return self._out_dtypes

    def perform_arrays(self, *arrays):
        """Evaluate the scalar graph on arrays with each scalar op's numpy function."""
        values = dict(zip(self.fgraph.inputs, arrays))
        for node in self.fgraph.toposort():
            args = [v.data if isinstance(v, Constant) else values[v] for v in node.inputs]
            results = node.op.perform_arrays(*[np.asarray(a) for a in args])
            for out, res in zip(node.outputs, results):
                res = np.asarray(res)
                values[out] = res.astype(out.type.dtype) if res.dtype.name != out.type.dtype \
                    else res
        return tuple(values[o] if not isinstance(o, Constant) else o.data
                     for o in self.fgraph.outputs)

    def nfunc(self, *arrays):
        out = self.perform_arrays(*arrays)
        return out if self.nout > 1 else out[0]

    def grad(self, inputs, outputs, output_grads):
        raise NotImplementedError("Composite has no gradient: differentiate before fusion")

    def __repr__(self):
        names = {v: f"i{k}" for k, v in enumerate(self.fgraph.inputs)}
        exprs = {}

        def text(var):
            if var in names:
                return names[var]
            if isinstance(var, Constant):
                return repr(var.data.item())
            if var in exprs:
                return exprs[var]
            node = var.owner
            args = [text(i) for i in node.inputs]
            sym = node.op.symbol
            if sym and len(args) == 2:
                out = f"({args[0]} {sym} {args[1]})"
            elif sym == "-" and len(args) == 1:
                out = f"-{args[0]}"
            else:
                out = f"{node.op.name}({', '.join(args)})"
            exprs[var] = out
            return out

        body = ", ".join(text(o) for o in self.fgraph.outputs)
        if len(body) > 120:
            body = body[:117] + "..."
        return f"Composite{{{body}}}"

    def fingerprint_key(self):
        return ("Composite", self.fgraph.fingerprint())


def scalar_apply(op: ScalarOp, inputs) -> Apply:
    """An Apply of scalar op `op` on scalar variables (output dtypes by numpy's rules)."""
    dtypes = op.output_dtypes(*[i.type.dtype for i in inputs])
    return Apply(op, inputs, [ScalarType(d) for d in dtypes])
