"""Stage invariants of graphs, checked by tests after every pass (production does not run them)."""

from __future__ import annotations

from verglas.graph.basic import Constant, Variable, intern_constant
from verglas.graph.fg import OUTPUT, FunctionGraph
from verglas.graph.frozen import (FrozenApply, FrozenFunctionGraph, NominalVariable, intern_node,
                                  nominal_input)
from verglas.graph.traversal import toposort
from verglas.graph.types import Type

__all__ = ["SpecError", "check_graph"]


class SpecError(AssertionError):
    """A graph breaks an invariant of its stage."""


def check_graph(fgraph) -> None:
    """Check the invariants of a FunctionGraph or FrozenFunctionGraph; raise SpecError."""
    if isinstance(fgraph, FrozenFunctionGraph):
        _check_frozen(fgraph)
    elif isinstance(fgraph, FunctionGraph):
        _check_mutable(fgraph)
    else:
        raise TypeError(f"check_graph: not a graph: {type(fgraph).__name__}")


def _fail(message: str) -> None:
    raise SpecError(message)


def _check_node_outputs(node) -> None:
    for k, out in enumerate(node.outputs):
        if not isinstance(out, Variable):
            _fail(f"{node}: output {k} is a {type(out).__name__}, not a Variable")
        if out.owner is not node or out.index != k:
            _fail(f"{node}: output {k} has owner {out.owner} and index {out.index}")
        if not isinstance(out.type, Type):
            _fail(f"{node}: output {k} has type {out.type!r}, which is not a Type")


def _check_mutable(fg: FunctionGraph) -> None:
    inputs = set(fg.inputs)
    if len(inputs) != len(fg.inputs):
        _fail("an input appears twice")
    for var in fg.inputs:
        if var.owner is not None:
            _fail(f"input {var} has an owner ({var.owner})")
    # Every client entry is a real use, and every use is a client entry.
    uses: dict = {}
    for node in fg.apply_nodes:
        _check_node_outputs(node)
        for i, var in enumerate(node.inputs):
            if var not in fg.variables:
                _fail(f"{node}: input {i} ({var}) is not among the graph's variables")
            uses.setdefault(var, []).append((node, i))
        for out in node.outputs:
            if out not in fg.variables:
                _fail(f"{node}: output {out} is not among the graph's variables")
    for k, out in enumerate(fg.outputs):
        if out not in fg.variables:
            _fail(f"output {k} ({out}) is not among the graph's variables")
        uses.setdefault(out, []).append((OUTPUT, k))
    if set(fg.clients) != fg.variables:
        extra = set(fg.clients) ^ fg.variables
        _fail(f"clients and variables disagree on {sorted(map(repr, extra))}")
    for var in fg.variables:
        got = fg.clients[var]
        want = uses.get(var, [])
        if sorted(map(_client_key, got)) != sorted(map(_client_key, want)):
            _fail(f"clients of {var} are {got}, but its uses are {want}")
        if var.owner is not None and var.owner not in fg.apply_nodes:
            _fail(f"{var} is owned by {var.owner}, which is not in apply_nodes")
        if var.owner is None and var not in inputs and not isinstance(var, Constant):
            _fail(f"orphan {var}: a root that is neither an input nor a constant")
    reachable = set(toposort(fg.outputs, fg.inputs))
    if reachable != fg.apply_nodes:
        dead = fg.apply_nodes - reachable
        _fail(f"apply_nodes has nodes the outputs do not reach: {sorted(map(repr, dead))}")


def _client_key(client) -> tuple:
    node, i = client
    return (0, 0, i) if node == OUTPUT else (1, id(node), i)


def _check_frozen(g: FrozenFunctionGraph) -> None:
    for name in ("inputs", "outputs"):
        if type(getattr(g, name)) is not tuple:
            _fail(f"frozen graph {name} are a {type(getattr(g, name)).__name__}, not a tuple")
    known: set = set()
    for k, var in enumerate(g.inputs):
        if not isinstance(var, NominalVariable) or var.position != k:
            _fail(f"frozen input {k} ({var!r}) is not the nominal input at position {k}")
        if nominal_input(k, var.type) is not var:
            _fail(f"frozen input {k} ({var!r}) is not the interned nominal input")
        known.add(var)
    listed = set()
    for pos, node in enumerate(g.toposort()):
        if type(node) is not FrozenApply:
            _fail(f"node {pos} is a {type(node).__name__}, not a FrozenApply")
        if type(node.inputs) is not tuple or type(node.outputs) is not tuple:
            _fail(f"{node}: inputs and outputs must be tuples")
        if node in listed:
            _fail(f"{node} is listed twice in the toposort")
        listed.add(node)
        if (node.position is None) != g.dedup_nodes:
            _fail(f"{node}: position {node.position} contradicts dedup_nodes={g.dedup_nodes}")
        for i, var in enumerate(node.inputs):
            _check_frozen_value(var, known, f"{node}: input {i}")
        _check_node_outputs(node)
        types = tuple(o.type for o in node.outputs)
        if intern_node(node.op, node.inputs, types, node.position) is not node:
            _fail(f"{node} is not the interned node for its (op, inputs) key")
        known.update(node.outputs)
    for k, var in enumerate(g.outputs):
        _check_frozen_value(var, known, f"output {k}")
    needed = set(toposort(g.outputs, g.inputs))
    if needed != listed:
        _fail(f"toposort lists nodes the outputs do not need: {sorted(map(repr, listed - needed))}")
    if hash(g) != hash((g.inputs, g.outputs)):
        _fail("the cached hash does not match the inputs and outputs")


def _check_frozen_value(var, known: set, where: str) -> None:
    if var in known:
        return
    if isinstance(var, Constant):
        if intern_constant(var) is not var:
            _fail(f"{where}: constant {var!r} is not the interned constant")
        return
    if var.owner is not None:
        _fail(f"{where}: {var!r} is computed by a node that comes later or is not in the graph")
    _fail(f"{where}: {var!r} is neither an input of the graph nor a constant")
