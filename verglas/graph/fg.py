"""FunctionGraph: the mutable workspace rewrites operate on."""

from __future__ import annotations

import functools

from verglas.graph.basic import Apply, Constant, Variable
from verglas.graph.features import CALLBACKS, AlreadyThere, Feature
from verglas.graph.traversal import clone as clone_graph
from verglas.graph.traversal import toposort

__all__ = ["FunctionGraph", "MissingInputError", "OUTPUT"]

OUTPUT = "output"  # the client "node" of a graph output: (OUTPUT, position)


class MissingInputError(ValueError):
    """The outputs depend on root variables that are neither inputs nor constants."""


class _Clients(list):
    """The clients of one variable: a list whose `remove` is O(1) (the last client takes the
    removed one's slot), so detaching the uses of a variable with many clients (a shared
    constant, a graph input) is not quadratic. Only FunctionGraph mutates it."""

    __slots__ = ("_pos",)

    def __init__(self, clients=()):
        super().__init__(clients)
        self._pos = {c: i for i, c in enumerate(clients)}

    def append(self, client) -> None:
        self._pos[client] = len(self)
        list.append(self, client)

    def remove(self, client) -> None:
        i = self._pos.pop(client)
        last = list.pop(self)
        if i < len(self):
            self[i] = last
            self._pos[last] = i

    def __reduce__(self):
        return (_Clients, (list(self),))


class FunctionGraph:
    """A graph between `inputs` and `outputs` that tracks clients and hosts Features.

    `clients[var]` lists `(node, i)` pairs for each use of `var` as input i of `node`, and
    `(OUTPUT, k)` for output k. Inputs must be root variables (pass `clone=True` to copy a
    graph whose inputs are not).
    """

    def __init__(self, inputs, outputs, features=(), clone: bool = False):
        inputs, outputs = list(inputs), list(outputs)
        if clone:
            inputs, outputs, _ = clone_graph(inputs, outputs)
        for i, var in enumerate(inputs):
            if not isinstance(var, Variable):
                raise TypeError(f"FunctionGraph: input {i} is not a Variable: {var!r}")
            if var.owner is not None:
                raise ValueError(
                    f"FunctionGraph: input {i} ({var}) is computed by {var.owner.op}; inputs "
                    f"must be root variables (use clone=True)"
                )
            if isinstance(var, Constant):
                raise TypeError(f"FunctionGraph: input {i} is a Constant ({var})")
        if len({id(v) for v in inputs}) != len(inputs):
            raise ValueError("FunctionGraph: an input is given twice")
        self.inputs: list[Variable] = inputs
        self.outputs: list[Variable] = []
        self.clients: dict[Variable, list] = {v: _Clients() for v in inputs}
        self.apply_nodes: set = set()
        self.variables: set = set(inputs)
        self.features: list[Feature] = []
        self._dispatch: dict[str, list] = {name: [] for name in CALLBACKS}
        self._provided: dict[str, Feature] = {}
        self._check_orphans(outputs)
        for k, out in enumerate(outputs):
            self.outputs.append(out)
            self._import_variable(out, reason="init")
            self.clients[out].append((OUTPUT, k))
        for feature in features:
            self.attach_feature(feature)

    # -- features ------------------------------------------------------------------------------
    def attach_feature(self, feature: Feature) -> None:
        """Attach `feature`, register its callbacks and provided methods, call on_attach."""
        if any(f is feature for f in self.features):
            raise AlreadyThere(f"{type(feature).__name__} is already attached")
        for name in feature.provides:
            if name in self._provided or name in type(self).__dict__:
                raise AlreadyThere(f"{type(feature).__name__}: {name!r} is already provided")
        self.features.append(feature)
        for name in feature.provides:
            self._provided[name] = feature
        for name in feature.callbacks:
            self._dispatch[name].append(feature)
        if "on_attach" in feature.callbacks:
            feature.on_attach(self)

    def remove_feature(self, feature: Feature) -> None:
        """Detach `feature` (calling its on_detach)."""
        self.features.remove(feature)
        for name in feature.provides:
            del self._provided[name]
        for name in feature.callbacks:
            self._dispatch[name].remove(feature)
        if "on_detach" in feature.callbacks:
            feature.on_detach(self)

    def __getattr__(self, name):
        provided = self.__dict__.get("_provided")
        if provided is not None and name in provided:
            return functools.partial(getattr(provided[name], name), self)
        raise AttributeError(f"FunctionGraph has no attribute or provided method {name!r}")

    def execute_callbacks(self, name: str, *args) -> None:
        """Call `name` on every Feature that registered it."""
        for feature in self._dispatch[name]:
            getattr(feature, name)(self, *args)

    def validate(self) -> None:
        """Run every Feature's validate callback (they raise InconsistencyError)."""
        self.execute_callbacks("validate")

    # -- structure -----------------------------------------------------------------------------
    def _check_orphans(self, outputs) -> None:
        known = self.variables
        missing, seen, stack = [], set(), list(outputs)
        while stack:
            var = stack.pop()
            if var in seen or var in known:
                continue
            seen.add(var)
            if var.owner is not None:
                stack.extend(var.owner.inputs)
            elif not isinstance(var, Constant):
                missing.append(var)
        if missing:
            names = ", ".join(repr(v) for v in missing)
            verb = "is" if len(missing) == 1 else "are"
            raise MissingInputError(f"FunctionGraph: the outputs depend on {names}, which {verb} "
                                    f"neither an input nor a constant")

    def _import_variable(self, var: Variable, reason) -> None:
        if var in self.variables:
            return
        self._check_orphans([var])
        new_nodes = toposort([var], self.variables)
        for node in new_nodes:
            if node in self.apply_nodes:
                continue
            self.apply_nodes.add(node)
            for i, inp in enumerate(node.inputs):
                if inp not in self.variables:
                    self.variables.add(inp)
                    self.clients.setdefault(inp, _Clients())
                self.clients[inp].append((node, i))
            for out in node.outputs:
                self.variables.add(out)
                self.clients.setdefault(out, _Clients())
            self.execute_callbacks("on_import", node, reason)
        if var not in self.variables:  # a root: a constant
            self.variables.add(var)
            self.clients.setdefault(var, _Clients())

    def _remove_client(self, var: Variable, client, reason) -> None:
        """Drop one use of `var`; prune its owner when nothing uses its outputs any more."""
        stack = [(var, client)]
        inputs = None  # a set, built once a pruning candidate needs it (graphs of many inputs)
        while stack:
            v, c = stack.pop()
            uses = self.clients[v]
            uses.remove(c)
            if uses:
                continue
            if inputs is None:
                inputs = set(self.inputs)
            if v in inputs:
                continue
            node = v.owner
            if node is None:
                if isinstance(v, Constant):
                    del self.clients[v]
                    self.variables.discard(v)
                continue
            if node not in self.apply_nodes or any(self.clients[o] for o in node.outputs):
                continue
            self.apply_nodes.remove(node)
            for o in node.outputs:
                self.variables.discard(o)
                del self.clients[o]
            self.execute_callbacks("on_prune", node, reason)
            for i, inp in enumerate(node.inputs):
                stack.append((inp, (node, i)))

    def change_node_input(self, node, i: int, new: Variable, reason=None,
                          check: bool = True) -> None:
        """Make input `i` of `node` (or output `i` when node is OUTPUT) be `new`."""
        old = self.outputs[i] if node == OUTPUT else node.inputs[i]
        if old is new:
            return
        if check:
            _check_replacement_type(old, new)
        self._import_variable(new, reason)
        if node == OUTPUT:
            self.outputs[i] = new
        else:
            node.inputs[i] = new
        self.clients[new].append((node, i))
        self._remove_client(old, (node, i), reason)
        self.execute_callbacks("on_change_input", node, i, old, new, reason)

    def replace(self, var: Variable, new: Variable, reason=None) -> None:
        """Make every user of `var` use `new` instead (types must match)."""
        if var is new:
            return
        _check_replacement_type(var, new)
        if var not in self.variables:
            return
        for node, i in list(self.clients[var]):
            if node != OUTPUT and node not in self.apply_nodes:
                continue
            self.change_node_input(node, i, new, reason=reason, check=False)

    def replace_all(self, pairs, reason=None) -> None:
        """Apply `replace` to each `(var, new)` pair in order."""
        for var, new in pairs:
            self.replace(var, new, reason=reason)

    def toposort(self) -> list:
        """The apply nodes in a deterministic topological order."""
        return toposort(self.outputs, self.inputs)

    def clone(self, with_features: bool = False) -> FunctionGraph:
        """A copy of this graph with fresh variables and nodes (constants shared)."""
        inputs, outputs, _ = clone_graph(self.inputs, self.outputs)
        features = [type(f)() for f in self.features] if with_features else ()
        return FunctionGraph(inputs, outputs, features)

    def freeze(self, dedup_nodes: bool = True):
        """The immutable, interned FrozenFunctionGraph computing the same outputs."""
        # not at the top: frozen.py imports this module (unfreeze() builds a FunctionGraph)
        from verglas.graph.frozen import freeze

        return freeze(self.inputs, self.outputs, dedup_nodes=dedup_nodes)

    def __repr__(self):
        return f"FunctionGraph({self.inputs} -> {self.outputs}, {len(self.apply_nodes)} nodes)"

    # -- pickling: plain state, nodes first in topological order so pickle never recurses deep --
    def __getstate__(self):
        state = {"_order": self.toposort()}
        state.update(self.__dict__)
        del state["_dispatch"], state["_provided"]
        return state

    def __setstate__(self, state):
        state.pop("_order")
        self.__dict__.update(state)
        self._dispatch = {name: [] for name in CALLBACKS}
        self._provided = {}
        for feature in self.features:
            for name in feature.provides:
                self._provided[name] = feature
            for name in feature.callbacks:
                self._dispatch[name].append(feature)


def _check_replacement_type(old: Variable, new: Variable) -> None:
    if old.type == new.type:
        return
    is_super = getattr(old.type, "is_super", None)
    if is_super is not None and is_super(new.type):
        return
    raise TypeError(
        f"cannot replace {old} of type {old.type} by {new} of type {new.type}"
    )


__all__ += ["Apply"]
