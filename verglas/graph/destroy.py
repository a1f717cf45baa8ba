"""DestroyHandler: the Feature that keeps inplace operations (ops with a `destroy_map`) valid.

A destroyer overwrites one of its inputs. That is valid when

- the storage it overwrites is not a graph input nor a constant (inputs are protected: a
  Function never modifies its caller's arrays), following views (`view_map`) and earlier
  inplace results (`destroy_map`) back to the array that owns the storage;
- every other reader of the value it overwrites, or of a view of that value, is one of its
  ancestors (so any topological order, the frozen graph's included, runs the reader first),
  and no graph output is that value or such a view;
- it is the value's only destroyer, and it reads no other view of that value (an elementwise
  op may read the very variable it overwrites: each element is read before it is written).

Validation is incremental: only destroyers whose value gained readers, views or a new input
since the last successful validation are checked again.
"""

from __future__ import annotations

from verglas.graph.basic import Constant
from verglas.graph.features import Feature, InconsistencyError, callback

__all__ = ["DestroyHandler", "storage_root"]

_OUTPUT = "output"  # FunctionGraph's client marker for graph outputs


def _view_parent(var):
    owner = var.owner
    if owner is None:
        return None
    view = owner.op.view_map.get(var.index)
    return owner.inputs[view[0]] if view else None


def _destroy_parent(var):
    owner = var.owner
    if owner is None:
        return None
    destroyed = owner.op.destroy_map.get(var.index)
    return owner.inputs[destroyed[0]] if destroyed else None


def _version_base(var):
    """The variable whose storage and value `var` shares through views only."""
    parent = _view_parent(var)
    while parent is not None:
        var, parent = parent, _view_parent(parent)
    return var


def _protected(var, inputs) -> bool:
    """Whether overwriting `var` would overwrite a graph input or a constant.

    Views are followed back; at an inplace result the walk stops: its destroyer overwrites the
    same storage and its own check (repeated whenever that storage's users change) covers it,
    which keeps a long chain of inplace results linear to validate.
    """
    while True:
        parent = _view_parent(var)
        if parent is None:
            break
        var = parent
    if _destroy_parent(var) is not None:
        return False
    return isinstance(var, Constant) or var in inputs


def storage_root(var):
    """The variable that owns the storage `var` lives in (through views and inplace results)."""
    while True:
        parent = _view_parent(var)
        if parent is None:
            parent = _destroy_parent(var)
        if parent is None:
            return var
        var = parent


def _version_class(fgraph, base) -> list:
    """`base` and every view of it (transitively): the variables holding the same value."""
    found, stack = [base], [base]
    seen = {base}
    clients = fgraph.clients
    while stack:
        var = stack.pop()
        for node, i in clients.get(var, ()):
            if node == _OUTPUT:
                continue
            for j, ins in node.op.view_map.items():
                if i in ins:
                    out = node.outputs[j]
                    if out not in seen:
                        seen.add(out)
                        found.append(out)
                        stack.append(out)
    return found


def _destroyed(node) -> list:
    return [ins[0] for ins in node.op.destroy_map.values()]


class DestroyHandler(Feature):
    """Validates the destroyers of a FunctionGraph (raises InconsistencyError).

    `destroyable`: graph inputs the graph may overwrite (a loop body's previous state, which
    no one reads after the step): not protected."""

    provides = ("destroyers", "destroyable")

    def __init__(self, destroyable=()):
        self._destroyable = frozenset(destroyable)
        self._destroyers: dict = {}  # node -> None, in insertion order
        self._dirty_nodes: set = set()
        self._dirty_vars: set = set()
        self._pos: dict | None = None  # node -> position; ancestors have smaller positions
        self._by_var: dict = {}  # destroyed variable -> its destroyers
        self._inputs: frozenset = frozenset()

    def destroyers(self, fgraph) -> list:
        """The nodes of the graph that overwrite an input."""
        return list(self._destroyers)

    def destroyable(self, fgraph) -> frozenset:
        """The graph inputs the graph may overwrite."""
        return self._destroyable

    def _index(self, node) -> None:
        for i in _destroyed(node):
            self._by_var.setdefault(node.inputs[i], set()).add(node)

    def _unindex(self, node, var=None) -> None:
        for i in _destroyed(node):
            v = node.inputs[i] if var is None else var
            found = self._by_var.get(v)
            if found is not None:
                found.discard(node)
                if not found:
                    del self._by_var[v]

    @callback
    def on_attach(self, fgraph):
        self._destroyers = {n: None for n in fgraph.toposort() if n.op.destroy_map}
        self._by_var = {}
        for node in self._destroyers:
            self._index(node)
        self._inputs = frozenset(fgraph.inputs) - self._destroyable
        self._dirty_nodes = set(self._destroyers)
        self._dirty_vars = set()
        self._pos = None

    @callback
    def on_import(self, fgraph, node, reason):
        if node.op.destroy_map:
            self._destroyers[node] = None
            self._index(node)
            self._dirty_nodes.add(node)
        self._dirty_vars.update(node.inputs)
        pos = self._pos
        if pos is not None:
            top = -1.0
            for var in node.inputs:
                owner = var.owner
                if owner is not None:
                    p = pos.get(owner)
                    if p is None:
                        self._pos = None
                        return
                    top = max(top, p)
            pos[node] = top + 1e-3  # after its inputs; clients are checked on change_input

    @callback
    def on_prune(self, fgraph, node, reason):
        if self._destroyers.pop(node, 0) is None:
            self._unindex(node)
        self._dirty_nodes.discard(node)

    @callback
    def on_change_input(self, fgraph, node, i, old, new, reason):
        self._dirty_vars.add(new)
        if node == _OUTPUT:
            return
        if node in self._destroyers:
            self._dirty_nodes.add(node)
            if i in _destroyed(node):
                found = self._by_var.get(old)
                if found is not None:
                    found.discard(node)
                self._by_var.setdefault(new, set()).add(node)
        pos = self._pos
        if pos is not None and new.owner is not None:
            p, q = pos.get(new.owner), pos.get(node)
            if p is None or q is None or p >= q:
                self._pos = None

    @callback
    def validate(self, fgraph):
        check = set(self._dirty_nodes)
        by_var = self._by_var
        for var in self._dirty_vars:
            if var not in fgraph.variables:
                continue
            base = _version_base(var)
            if base.owner is None:  # an input or a constant: no valid destroyer to revisit
                continue
            for alias in _version_class(fgraph, base):
                check.update(by_var.get(alias, ()))
        for node in check:
            if node in fgraph.apply_nodes:
                self._check(fgraph, node)
        self._dirty_nodes.clear()
        self._dirty_vars.clear()

    # -- the rules -----------------------------------------------------------------------------
    def _check(self, fgraph, node) -> None:
        for i in _destroyed(node):
            var = node.inputs[i]
            if _protected(var, self._inputs):
                raise InconsistencyError(f"{node.op} would overwrite a graph input or a "
                                         f"constant ({storage_root(var)!r})")
            readers = []
            for alias in _version_class(fgraph, _version_base(var)):
                for client, k in fgraph.clients.get(alias, ()):
                    if client == _OUTPUT:
                        raise InconsistencyError(f"{node.op} would overwrite {alias!r}, a graph "
                                                 f"output")
                    if client is node:
                        if alias is not var:
                            raise InconsistencyError(f"{node.op} reads a view of the value it "
                                                     f"overwrites")
                        continue
                    op = client.op
                    if any(k in ins for ins in op.view_map.values()):
                        continue  # a view: its own readers are among the aliases
                    if k in _destroyed(client):
                        raise InconsistencyError(f"{node.op} and {op} both overwrite "
                                                 f"{alias!r}")
                    readers.append(client)
            if readers and not self._are_ancestors(fgraph, readers, node):
                raise InconsistencyError(f"{node.op} would overwrite {var!r}, which is read "
                                         f"later")

    def _positions(self, fgraph) -> dict:
        if self._pos is None:
            self._pos = {n: float(k) for k, n in enumerate(fgraph.toposort())}
        return self._pos

    def _are_ancestors(self, fgraph, readers, node) -> bool:
        """Whether every node of `readers` is an ancestor of `node`."""
        pos = self._positions(fgraph)
        if node not in pos or any(r not in pos for r in readers):
            self._pos = None
            pos = self._positions(fgraph)
        here = pos[node]
        pending = set(readers)
        if any(pos[r] >= here for r in pending):
            return False
        low = min(pos[r] for r in pending)
        stack = [v.owner for v in node.inputs if v.owner is not None]
        seen: set = set()
        while stack and pending:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            pending.discard(n)
            for v in n.inputs:
                owner = v.owner
                if owner is not None and owner not in seen and pos.get(owner, low) >= low:
                    stack.append(owner)
        return not pending
