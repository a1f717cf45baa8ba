"""Which loops a thread pool shares out when they are large, and what each element costs.

Decided here, not in a backend, so that `print(f.program)` shows it: the CPU backend runs
these loops in chunks on numba's thread pool when their work passes its serial threshold
(cpu_backend/parallel_for.py) and a pool safe under concurrent calls is there; CUDA kernels
are parallel anyway and ignore it.

- A row group's loop over its rows: one unit of work per element.
- An elementwise step's loop over arrays, in a program with no matrix product: OpenBLAS's
  threads spin for ~0.1 s after each product and hold the other cores, so loops handed to a
  second pool there ran no faster (measured: the transformer block, 12.06 ms pooled against
  11.92 ms serial) and cost compile time. Not in a loop body (its steps are small, and run
  once per step of the loop), not a step the general variant broadcasts at run time (its
  loop indexes by run-time strides), and not one a reduction computes in its own loop.
- A reduction over all its axes (sum, max, ... of a whole array), in the same programs: the
  array is split into parts along its first axis, each part reduced on its own, then the
  parts' results combined in order. The parts depend on the shape alone (`reduction_parts`),
  so a result is the same with or without threads. Its work per element is one eighth plus
  that of an elementwise step it computes in its loop (`sum(x * x)`).
- A reduction over its last axes (not a row group's: one whose elementwise producer
  broadcasts, as pairwise distances `((a[:, None] - b[None]) ** 2).sum(-1)` do), in the same
  programs: the rows of its first axis, each output element reduced on its own; the same
  work per element.
- An argmax or argmin along one axis of an array of 2-d or more, in the same programs: the
  rows of its first other axis, one eighth per element.

In an elementwise step, an element of an elementary function (exp, tanh, pow, ...) costs one
unit, any other operation an eighth.
"""

from __future__ import annotations

from verglas.ops import scalar as s
from verglas.ops.elemwise import Elemwise
from verglas.ops.linalg import MatMul
from verglas.ops.reduce import Argmax, Reduce

__all__ = ["pooled_loops", "has_products", "reduction_parts", "GROUP_WORK", "MAX_PARTS",
           "PART_ELEMENTS"]

# eighths of a work unit per element
GROUP_WORK = 8
# a whole-array reduction: at most MAX_PARTS parts of at least PART_ELEMENTS elements each
MAX_PARTS, PART_ELEMENTS = 16, 16384
_ELEMENTARY = (s.Exp, s.Expm1, s.Log, s.Log1p, s.Sin, s.Cos, s.Tan, s.Tanh, s.Sigmoid,
               s.Softplus, s.Erf, s.Pow)


def has_products(graph) -> bool:
    """Whether `graph` or an inner graph of it has a matrix product."""
    return any(isinstance(node.op, MatMul)
               or (node.op.inner_graph is not None and has_products(node.op.inner_graph))
               for node in graph.apply_nodes)


def element_work(op) -> int:
    """Eighths of a work unit per element of the Elemwise `op`."""
    graph = getattr(op.scalar_op, "fgraph", None)
    ops = [node.op for node in graph.apply_nodes] if graph is not None else [op.scalar_op]
    return sum(8 if isinstance(o, _ELEMENTARY) else 1 for o in ops)


def _reduces_a_suffix(op, ndim: int) -> bool:
    """Whether reduction `op` of an `ndim`-d array reduces all its axes, or its last ones
    (each output element then has a loop of its own: the pool shares out the first axis)."""
    return ndim >= 1 and len(op.axis) >= 1 and set(op.axis) == set(range(ndim - len(op.axis),
                                                                         ndim))


def reduction_parts(rows: str, size: str) -> str:
    """The expression of how many parts a whole-array reduction of `size` elements, `rows`
    along its first axis, is split into: the same for every call on that shape."""
    return f"max(1, min({MAX_PARTS}, {rows}, ({size}) // {PART_ELEMENTS}))"


def pooled_loops(steps, groups, fused_maps, unchecked, elementwise: bool) -> tuple:
    """((step index, eighths of work per element), ...): the loops the pool may share out, a
    row group's under its first step. `elementwise`: this program's elementwise loops and
    whole-array reductions may be pooled (no products, not a loop body); `unchecked`: steps
    whose broadcasting is known only at run time in this variant; `fused_maps` (reduction,
    producer) pairs."""
    pooled = [(g.first, GROUP_WORK) for g in groups]
    if elementwise:
        grouped = {st.index for g in groups for st in g.steps}
        producers = dict(fused_maps)
        elsewhere = grouped | set(producers.values()) | unchecked
        for step in steps:
            op = step.node.op
            if (isinstance(op, Elemwise) and step.node.outputs[0].ndim >= 1
                    and step.index not in elsewhere):
                pooled.append((step.index, element_work(op)))
            elif (isinstance(op, Reduce) and _reduces_a_suffix(op, step.node.inputs[0].ndim)
                  and step.index not in grouped and producers.get(step.index) not in unchecked):
                producer = producers.get(step.index)
                extra = 0 if producer is None else element_work(steps[producer].node.op)
                pooled.append((step.index, 1 + extra))
            elif (isinstance(op, Argmax) and op.axis is not None
                  and step.node.inputs[0].ndim >= 2):
                pooled.append((step.index, 1))
    return tuple(sorted(pooled))
