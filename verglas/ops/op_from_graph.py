"""OpFromGraph: a reusable subgraph as one op, holding a frozen inner graph.

Also the helpers inner-graph ops share: `rebuild_graph` (a frozen graph re-applied on outer
variables), `infer_shapes` (symbolic shape inference through a graph) and
`connection_pattern` (which inputs each output depends on).
"""

from __future__ import annotations

import numpy as np

from verglas.graph.basic import Apply, Constant, Variable
from verglas.graph.frozen import FrozenFunctionGraph, freeze
from verglas.graph.op import Op
from verglas.graph.reference import ReferenceRunner
from verglas.graph.traversal import graph_replace, toposort
from verglas.graph.types import TensorType
from verglas.ops.autodiff import vjp
from verglas.ops.basic import ShapeI, as_tensor, constant, shape_i
from verglas.ops.math import cast

__all__ = ["OpFromGraph", "inline_ofg", "rebuild_graph", "infer_shapes", "connection_pattern",
           "run_inner"]


def rebuild_graph(fgraph: FrozenFunctionGraph, inputs) -> list[Variable]:
    """The outputs of `fgraph` rebuilt as fresh mutable nodes on the variables `inputs`."""
    inputs = list(inputs)
    if len(inputs) != len(fgraph.inputs):
        raise ValueError(f"rebuild_graph: {len(inputs)} inputs for a graph of "
                         f"{len(fgraph.inputs)}")
    memo: dict = dict(zip(fgraph.inputs, inputs))
    for node in fgraph.toposort():
        new = Apply(node.op, [memo.get(v, v) for v in node.inputs],
                    [o.type for o in node.outputs])
        memo.update(zip(node.outputs, new.outputs))
    return [memo.get(v, v) for v in fgraph.outputs]


def connection_pattern(fgraph: FrozenFunctionGraph) -> tuple[tuple[bool, ...], ...]:
    """`pattern[i][j]` is True when output j of `fgraph` depends on input i."""
    masks: dict = {v: 1 << i for i, v in enumerate(fgraph.inputs)}
    for node in fgraph.toposort():
        mask = 0
        for v in node.inputs:
            mask |= masks.get(v, 0)
        for out in node.outputs:
            masks[out] = mask
    out_masks = [masks.get(v, 0) for v in fgraph.outputs]
    return tuple(tuple(bool(m >> i & 1) for m in out_masks) for i in range(len(fgraph.inputs)))


def _shape_entry(value):
    return value if isinstance(value, Variable) else constant(int(value), "int64")


def _read_shape(var: Variable) -> tuple:
    if isinstance(var, Constant):
        return tuple(constant(d, "int64") for d in var.data.shape)
    return tuple(shape_i(var, d) for d in range(var.type.ndim))


def infer_shapes(outputs, known: dict) -> list[tuple]:
    """Symbolic shapes of `outputs` from `known` (variable -> shape tuple), node by node.

    An op without `infer_shape` contributes the shapes read from its outputs at run time.
    A shape computed from values that are themselves lengths (`SumToShape(g, [x.shape[1]])`,
    an `Alloc` to another variable's shape) is rewritten in terms of the known shapes, so it
    does not read the graph's variables when their shapes suffice.
    """
    shapes: dict = {k: tuple(_shape_entry(d) for d in s) for k, s in known.items()}
    reads: dict = {}  # a ShapeI node's output -> the length it reads, where that is known
    for node in toposort(outputs, shapes):
        in_shapes = [shapes[v] if v in shapes else _read_shape(v) for v in node.inputs]
        if isinstance(node.op, ShapeI) and node.inputs[0] in shapes:
            length = shapes[node.inputs[0]][node.op.i]
            if length.type == node.outputs[0].type and length.owner is not node:
                reads[node.outputs[0]] = length
        try:
            out_shapes = node.op.infer_shape(None, node, in_shapes)
        except NotImplementedError:
            out_shapes = [_read_shape(o) for o in node.outputs]
        for out, s in zip(node.outputs, out_shapes):
            shapes[out] = tuple(_shape_entry(d) for d in s)
    result = [shapes[v] if v in shapes else _read_shape(v) for v in outputs]
    if not reads:
        return result
    flat = graph_replace([d for s in result for d in s], reads)
    out, k = [], 0
    for s in result:
        out.append(tuple(flat[k:k + len(s)]))
        k += len(s)
    return out


def run_inner(op, inputs: list) -> list:
    """Run `op.fgraph` on numpy `inputs` with a ReferenceRunner cached on the op."""
    runner = op.__dict__.get("_runner")
    if runner is None:
        runner = op.__dict__["_runner"] = ReferenceRunner(
            op.fgraph, getattr(op, "overwritable_inputs", ()))
    return runner(inputs)


def _owned(value, inputs, previous) -> np.ndarray:
    """`value`, copied when it is read-only or aliases an input or an earlier output."""
    value = np.asarray(value)
    if (not value.flags.writeable or any(np.may_share_memory(value, x) for x in inputs)
            or any(np.may_share_memory(value, p) for p in previous)):
        value = value.copy()
    return value


def _is_float(t) -> bool:
    return np.dtype(t.dtype).kind in "fc"


class OpFromGraph(Op):
    """A subgraph from `inputs` to `outputs` as one reusable op; calling it applies it.

    The graph is frozen, so two OpFromGraphs of structurally identical graphs are equal and
    hash alike in O(1). With `inline=True` a rewrite expands it into the outer graph.
    """

    __props__ = ("fgraph", "inline")

    def __init__(self, inputs, outputs, inline: bool = False):
        inputs = [inputs] if isinstance(inputs, Variable) else list(inputs)
        outputs = [outputs] if isinstance(outputs, Variable) else list(outputs)
        for k, var in enumerate(inputs):
            if not isinstance(var, Variable) or isinstance(var, Constant):
                raise TypeError(f"OpFromGraph: input {k} ({var!r}) must be a non-constant "
                                f"variable")
        for k, var in enumerate(outputs):
            if not isinstance(var, Variable):
                raise TypeError(f"OpFromGraph: output {k} is {type(var).__name__}, not a "
                                f"variable")
        if len({id(v) for v in inputs}) != len(inputs):
            raise ValueError("OpFromGraph: an input variable is listed twice")
        self._setup(freeze(inputs, outputs), inline)

    @classmethod
    def from_graph(cls, fgraph: FrozenFunctionGraph, inline: bool = False) -> OpFromGraph:
        """The OpFromGraph of an already frozen graph (used by rewrites and gradients)."""
        op = cls.__new__(cls)
        op._setup(fgraph, inline)
        return op

    def _setup(self, fgraph, inline):
        # What the op needs from its graph is derived here, once, and stored.
        self.fgraph = fgraph
        self.inline = bool(inline)
        self.input_types = tuple(v.type for v in fgraph.inputs)
        self.output_types = tuple(v.type for v in fgraph.outputs)
        self.connection_pattern = connection_pattern(fgraph)

    @property
    def inner_graph(self) -> FrozenFunctionGraph:
        return self.fgraph

    def replace(self, **changes) -> OpFromGraph:
        """This op with `fgraph` and/or `inline` changed (self when nothing changes)."""
        fgraph = changes.pop("fgraph", self.fgraph)
        inline = changes.pop("inline", self.inline)
        if changes:
            raise TypeError(f"OpFromGraph.replace: unknown props {sorted(changes)}")
        if fgraph is self.fgraph and inline == self.inline:
            return self
        return OpFromGraph.from_graph(fgraph, inline)

    def __repr__(self):
        n_in, n_out = len(self.input_types), len(self.output_types)
        mark = ", inline" if self.inline else ""
        return f"OpFromGraph{{{n_in}->{n_out}, {len(self.fgraph.toposort())} nodes{mark}}}"

    def __getstate__(self):
        state = super().__getstate__()
        state.pop("_runner", None)
        state.pop("_grad", None)
        return state

    def restrict(self, keep_outputs) -> tuple[OpFromGraph, tuple[int, ...], tuple[int, ...]] | None:
        """An OpFromGraph computing only the outputs `keep_outputs` (their indices): `(new_op,
        the old node's input indices it takes, the old output indices it gives)`, or None when
        it would be this op."""
        outs = sorted(set(keep_outputs))
        ins = [i for i, row in enumerate(self.connection_pattern) if any(row[j] for j in outs)]
        if len(outs) == len(self.output_types) and len(ins) == len(self.input_types):
            return None
        fresh = [t.make_variable() for t in self.input_types]
        new_outs = rebuild_graph(self.fgraph, fresh)
        new = OpFromGraph([fresh[i] for i in ins], [new_outs[j] for j in outs], self.inline)
        return new, tuple(ins), tuple(outs)

    def make_node(self, *inputs):
        if len(inputs) != len(self.input_types):
            raise TypeError(f"{self}: expected {len(self.input_types)} inputs, got "
                            f"{len(inputs)}")
        converted = []
        for k, (x, t) in enumerate(zip(inputs, self.input_types)):
            if not isinstance(x, Variable):
                arr = np.asarray(x)
                if arr.dtype == object or not np.can_cast(arr.dtype, t.dtype, "same_kind"):
                    raise TypeError(f"{self}: input {k} ({x!r}) cannot become {t}")
                x = constant(arr.astype(t.dtype))
            x = as_tensor(x)
            if x.type != t and not t.is_super(x.type):
                raise TypeError(f"{self}: input {k} has type {x.type}, the inner graph expects "
                                f"{t}")
            converted.append(x)
        return Apply(self, converted, self.output_types)

    def perform(self, node, inputs, outputs):
        results = run_inner(self, list(inputs))
        done: list = []
        for storage, value in zip(outputs, results):
            storage[0] = _owned(value, inputs, done)
            done.append(storage[0])

    def infer_shape(self, fgraph, node, input_shapes):
        outs = rebuild_graph(self.fgraph, node.inputs)
        return infer_shapes(outs, dict(zip(node.inputs, input_shapes)))

    def L_op(self, inputs, outputs, output_grads):
        grad_op, wrt, seeded = self._gradient()
        if grad_op is None:
            return [None] * len(inputs)
        cotangents = [output_grads[j] if output_grads[j].dtype == self.output_types[j].dtype
                      else cast(output_grads[j], self.output_types[j].dtype) for j in seeded]
        grads = grad_op(*inputs, *cotangents)
        grads = [grads] if isinstance(grads, Variable) else grads
        result: list = [None] * len(inputs)
        for i, g in zip(wrt, grads):
            result[i] = g
        return result

    def _gradient(self):
        """(gradient OpFromGraph, input indices it differentiates, outputs it is seeded by).

        Built once per op: the vector-Jacobian product of the inner graph, itself an
        OpFromGraph of (inputs, output cotangents), so every use shares one compiled gradient.
        """
        cached = self.__dict__.get("_grad")
        if cached is not None:
            return cached
        xs = [t.make_variable(f"x{i}") for i, t in enumerate(self.input_types)]
        outs = rebuild_graph(self.fgraph, xs)
        seeded = tuple(j for j, t in enumerate(self.output_types) if _is_float(t))
        gs = [TensorType(self.output_types[j].dtype, (None,) * self.output_types[j].ndim)
              .make_variable(f"g{j}") for j in seeded]
        wrt = [i for i, t in enumerate(self.input_types)
               if _is_float(t) and any(self.connection_pattern[i][j] for j in seeded)]
        grads = vjp([outs[j] for j in seeded], gs, [xs[i] for i in wrt])
        kept = [(i, g) for i, g in zip(wrt, grads) if g is not None]
        if not kept:
            cached = (None, (), ())
        else:
            grad_op = OpFromGraph(xs + gs, [g for _, g in kept], inline=self.inline)
            cached = (grad_op, tuple(i for i, _ in kept), seeded)
        self.__dict__["_grad"] = cached
        return cached


def inline_ofg(op: OpFromGraph, inputs) -> list[Variable]:
    """The outputs of `op` computed by its inner graph rebuilt on the outer `inputs`."""
    return rebuild_graph(op.fgraph, inputs)
