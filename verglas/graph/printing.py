"""dprint: one readable tree printer for variables, graphs, inner graphs and compiled functions."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from verglas.graph.basic import Node, Variable
from verglas.graph.fg import FunctionGraph
from verglas.graph.frozen import FrozenFunctionGraph, NominalVariable
from verglas.graph.op import Op

__all__ = ["dprint"]

_TEE, _ELBOW, _PIPE, _BLANK = "├─ ", "└─ ", "│  ", "   "


def dprint(obj, file=None, print_type: bool = False) -> str:
    """Print `obj` as a tree to `file` (stdout by default; "str" prints nothing); return the text.

    `obj` is a Variable, a list of them, an Apply node, a FunctionGraph, a FrozenFunctionGraph,
    or anything whose `.graph` is a FrozenFunctionGraph (a compiled function). A subtree used
    twice prints once, later uses show its `[id X]` followed by `···`; inner graphs of ops
    (any prop that is a FrozenFunctionGraph) print once each under "Inner graphs:".
    """
    printer = _Printer(print_type)
    roots, order = _roots(obj)
    lines: list[str] = []
    for var in roots:
        printer.tree(var, lines, order)
    # Inner graphs found while printing may themselves hold inner graphs: print until none new.
    done = 0
    if printer.inner:
        lines += ["", "Inner graphs:"]
    while done < len(printer.inner):
        graph, op, node = printer.inner[done]
        done += 1
        lines += ["", f"{op} [id {printer.node_id(node)}]"]
        inner_order = {n: k for k, n in enumerate(graph.toposort())}
        for var in graph.outputs:
            printer.tree(var, lines, inner_order, root_prefix=" ← ", child_prefix="    ")
    text = "\n".join(lines) + "\n"
    if file != "str":
        (sys.stdout if file is None else file).write(text)
    return text


def _roots(obj) -> tuple[list[Variable], dict]:
    """(the variables to print, node -> toposort position or empty)."""
    graph = getattr(obj, "graph", None)
    if isinstance(graph, FrozenFunctionGraph) and not isinstance(obj, FrozenFunctionGraph):
        obj = graph
    if isinstance(obj, (FunctionGraph, FrozenFunctionGraph)):
        return list(obj.outputs), {n: k for k, n in enumerate(obj.toposort())}
    if isinstance(obj, Variable):
        return [obj], {}
    if isinstance(obj, Node):
        return list(obj.outputs), {}
    if isinstance(obj, Sequence) and all(isinstance(v, Variable) for v in obj):
        return list(obj), {}
    raise TypeError(f"dprint: cannot print a {type(obj).__name__}")


def _inner_graphs(op) -> list[FrozenFunctionGraph]:
    """The frozen graphs an op carries: in its props (also inside ops held as props, like
    Elemwise(Composite)), or as its `fgraph` attribute."""
    graphs: list = []
    values = [getattr(op, name, None) for name in getattr(op, "__props__", ())]
    values.append(getattr(op, "fgraph", None))
    for value in values:
        for v in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(v, Op):
                found = _inner_graphs(v)
            elif isinstance(v, FrozenFunctionGraph):
                found = [v]
            else:
                continue
            graphs += [g for g in found if not any(g is h for h in graphs)]
    return graphs


class _Printer:
    """Holds the id allocator and what was already expanded, shared by every tree printed."""

    def __init__(self, print_type: bool):
        self.print_type = print_type
        self.ids: dict = {}  # node or root variable -> "A", "B", ...
        self.expanded: set = set()
        self.inner: list[tuple] = []  # (graph, op, first node) in order of discovery
        self.inner_seen: set = set()

    def node_id(self, key) -> str:
        name = self.ids.get(key)
        if name is None:
            name = self.ids[key] = _letters(len(self.ids))
        return name

    def label(self, var: Variable, order: dict) -> str:
        node = var.owner
        if isinstance(var, NominalVariable):
            text = repr(var)  # i0, i1, ...: already unique within a graph
        elif node is None:
            text = f"{var!r} [id {self.node_id(var)}]"
        else:
            op = node.op
            text = str(op) if len(node.outputs) == 1 else f"{op}.{var.index}"
            text += f" [id {self.node_id(node)}]"
            if op.destroy_map:
                text += f" d={dict(op.destroy_map)}"
            if op.view_map:
                text += f" v={dict(op.view_map)}"
            if node in order:
                text += f" {order[node]}"
            if var.name is not None:
                text += f" '{var.name}'"
        if self.print_type:
            text += f" <{var.type}>"
        return text

    def tree(self, root: Variable, lines: list, order: dict, root_prefix: str = "",
             child_prefix: str = " ") -> None:
        # Iterative (deep graphs print without hitting the recursion limit).
        stack = [(root, root_prefix, child_prefix)]
        while stack:
            var, prefix, below = stack.pop()
            lines.append(prefix + self.label(var, order))
            node = var.owner
            if node is None:
                continue
            for graph in _inner_graphs(node.op):
                if graph not in self.inner_seen:
                    self.inner_seen.add(graph)
                    self.inner.append((graph, node.op, node))
            if node in self.expanded:
                if node.inputs:
                    lines.append(below + _ELBOW + "···")
                continue
            self.expanded.add(node)
            last = len(node.inputs) - 1
            for k in range(last, -1, -1):
                connector, extend = (_ELBOW, _BLANK) if k == last else (_TEE, _PIPE)
                stack.append((node.inputs[k], below + connector, below + extend))


def _letters(n: int) -> str:
    """0 -> A, 25 -> Z, 26 -> AA, ... (bijective base 26: shortest names first)."""
    out = ""
    n += 1
    while n:
        n, r = divmod(n - 1, 26)
        out = chr(65 + r) + out
    return out
