"""The immutable, hash-consed IR: FrozenApply, nominal inputs, interned constants and
FrozenFunctionGraph.

Interning happens in three weak-valued tables: nodes keyed by (op, inputs, output
types[, position]) and nominal inputs by (position, type), here, and constants by (type, bytes),
in basic.py next to Constant (a pickled constant re-interns itself). Two frozen graphs that
compute the same thing are therefore made of the very same objects: equality is identity of
inputs and outputs and hashing is O(1).
"""

from __future__ import annotations

import gc
import hashlib
import weakref

from verglas.graph.basic import (Apply, Constant, Node, Variable, intern_constant,
                                  interned_constant_count)
from verglas.graph.fg import FunctionGraph, MissingInputError
from verglas.graph.op import stable_key

__all__ = ["FrozenApply", "NominalVariable", "FrozenFunctionGraph", "freeze", "intern_node",
           "nominal_input", "intern_table_sizes"]

_NODES: dict = {}  # key -> weakref to the FrozenApply
_NOMINALS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_GRAPHS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def intern_table_sizes() -> tuple[int, int, int]:
    """(nodes, nominal inputs, constants) currently interned: for leak tests."""
    return len(_NODES), len(_NOMINALS), interned_constant_count()


class FrozenApply(Node):
    """An interned, immutable node: tuple inputs and outputs; built only by `intern_node`."""

    __slots__ = ("op", "inputs", "outputs", "position", "__weakref__")
    frozen = True

    def __setattr__(self, name, value):
        raise AttributeError("FrozenApply is immutable")

    def __reduce__(self):
        return (intern_node, (self.op, self.inputs, tuple(o.type for o in self.outputs),
                              self.position))


class NominalVariable(Variable):
    """The input at `position` of a frozen graph: interned by (position, type)."""

    __slots__ = ("position",)

    def clone(self):
        return self

    def __reduce_ex__(self, protocol):
        return (nominal_input, (self.position, self.type))

    def __repr__(self):
        return f"i{self.position}"

    __str__ = __repr__


_new_node = object.__new__
_set_op = FrozenApply.op.__set__
_set_inputs = FrozenApply.inputs.__set__
_set_outputs = FrozenApply.outputs.__set__
_set_position = FrozenApply.position.__set__


def intern_node(op, inputs: tuple, output_types: tuple, position: int | None = None):
    """The canonical FrozenApply of `op` on frozen `inputs` (position keeps twins apart)."""
    # Inputs are keyed by id: a live node holds its inputs, so their ids cannot be reused while
    # its entry exists, and the table holds no strong reference into the graph (one gc pass
    # frees a dropped graph whatever its depth). The key is flat: no nested tuple to build.
    key = (op, output_types, position, *map(id, inputs))
    ref = _NODES.get(key)
    if ref is not None:
        node = ref()
        if node is not None:
            return node
    node = _new_node(FrozenApply)
    _set_op(node, op)
    _set_inputs(node, inputs)
    _set_position(node, position)
    if len(output_types) == 1:
        t = output_types[0]
        outputs = ((t.variable_class or Variable)(t, node, 0, None),)
    else:
        outputs = tuple([(t.variable_class or Variable)(t, node, i, None)
                         for i, t in enumerate(output_types)])
    _set_outputs(node, outputs)
    _NODES[key] = _KeyedRef(node, _drop_node, key)
    return node


class _KeyedRef(weakref.ref):
    """A weak reference that remembers its table key (one shared callback, no closure)."""

    __slots__ = ("key",)

    def __new__(cls, obj, callback, key):
        self = super().__new__(cls, obj, callback)
        self.key = key
        return self

    def __init__(self, obj, callback, key):
        super().__init__(obj, callback)


def _drop_node(ref):
    if _NODES.get(ref.key) is ref:
        del _NODES[ref.key]


def nominal_input(position: int, type):
    """The canonical nominal input variable at `position` with `type`."""
    key = (position, type)
    var = _NOMINALS.get(key)
    if var is None:
        var = NominalVariable(type, None, None, None)
        var.position = position
        _NOMINALS[key] = var
    return var


def freeze(inputs, outputs, dedup_nodes: bool = True) -> FrozenFunctionGraph:
    """Intern the graph from `inputs` to `outputs` into a FrozenFunctionGraph.

    With `dedup_nodes=False` each node's topological position joins its key, so structurally
    identical nodes of one graph stay distinct (they may own distinct inplace buffers) while two
    structurally identical graphs still freeze to the same objects.
    """
    gc_was_enabled = gc.isenabled()
    gc.disable()  # freezing allocates many objects and frees none: skip useless gc passes
    try:
        return _freeze(inputs, outputs, dedup_nodes)
    finally:
        if gc_was_enabled:
            gc.enable()


def _freeze(inputs, outputs, dedup_nodes):
    # One iterative post-order walk that interns each node as soon as its inputs are frozen:
    # memo (mutable variable -> frozen variable) doubles as the walk's "done" set.
    memo: dict = {}
    for i, var in enumerate(inputs):
        memo[var] = nominal_input(i, var.type)
    nodes: dict = {}  # frozen node -> None, in order; a dict folds twins in one step
    on_path: set = set()
    pos = 0
    for out in outputs:
        if out in memo:
            continue
        if out.owner is None:
            _frozen_root(out, memo)
            continue
        stack, starts = [out.owner], [0]
        on_path.add(out.owner)
        while stack:
            node = stack[-1]
            ins = node.inputs
            i, n = starts[-1], len(ins)
            while i < n:
                var = ins[i]
                i += 1
                if var in memo:
                    continue
                owner = var.owner
                if owner is None:
                    _frozen_root(var, memo)
                    continue
                if owner in on_path:
                    raise ValueError(f"freeze: cycle in graph at {owner}")
                starts[-1] = i
                stack.append(owner)
                starts.append(0)
                on_path.add(owner)
                break
            else:
                stack.pop()
                starts.pop()
                on_path.discard(node)
                outs = node.outputs
                if n == 1:
                    frozen_inputs = (memo[ins[0]],)
                else:
                    frozen_inputs = tuple([memo[v] for v in ins])
                if len(outs) == 1:
                    out0 = outs[0]
                    fnode = intern_node(node.op, frozen_inputs, (out0.type,),
                                        None if dedup_nodes else pos)
                    memo[out0] = fnode.outputs[0]
                else:
                    fnode = intern_node(node.op, frozen_inputs, tuple([o.type for o in outs]),
                                        None if dedup_nodes else pos)
                    for old, new in zip(outs, fnode.outputs):
                        memo[old] = new
                nodes[fnode] = None
                pos += 1
    frozen_outputs = tuple([memo[v] for v in outputs])
    frozen_inputs = tuple([memo[v] for v in inputs])
    return FrozenFunctionGraph._make(frozen_inputs, frozen_outputs, tuple(nodes), dedup_nodes)


def _frozen_root(var, memo):
    if isinstance(var, Constant):
        memo[var] = c = intern_constant(var)
        return c
    raise MissingInputError(
        f"freeze: the outputs depend on {var!r}, which is neither an input nor a constant"
    )


class FrozenFunctionGraph:
    """An immutable graph of interned nodes; `==` is identity of inputs and outputs.

    Build one with `FunctionGraph.freeze()` or `freeze(inputs, outputs)`; `unfreeze()` returns
    a fresh mutable FunctionGraph.
    """

    __slots__ = ("inputs", "outputs", "_nodes", "dedup_nodes", "_hash", "_fingerprint",
                 "_clients", "__weakref__")

    @classmethod
    def _make(cls, inputs, outputs, nodes, dedup_nodes):
        """The canonical graph with these inputs and outputs (built by `_new` if none)."""
        # Graphs are interned too: two equal graphs are one object, so == is `is` whatever the
        # number of inputs and outputs (a live graph holds them: their ids stay valid).
        key = (dedup_nodes, len(inputs), *map(id, inputs), *map(id, outputs))
        self = _GRAPHS.get(key)
        if self is None:
            self = _GRAPHS[key] = cls._new(inputs, outputs, nodes, dedup_nodes)
        return self

    @classmethod
    def _new(cls, inputs, outputs, nodes, dedup_nodes):
        self = object.__new__(cls)
        set_ = object.__setattr__
        set_(self, "inputs", inputs)
        set_(self, "outputs", outputs)
        set_(self, "_nodes", nodes)
        set_(self, "dedup_nodes", dedup_nodes)
        set_(self, "_hash", hash((inputs, outputs)))
        set_(self, "_fingerprint", None)
        set_(self, "_clients", None)
        return self

    def __setattr__(self, name, value):
        raise AttributeError("FrozenFunctionGraph is immutable")

    def __eq__(self, other):
        if self is other:
            return True
        if type(other) is not FrozenFunctionGraph:
            return NotImplemented
        return (self._hash == other._hash and self.inputs == other.inputs
                and self.outputs == other.outputs)

    def __hash__(self):
        return self._hash

    def toposort(self) -> tuple:
        """The nodes in topological order (computed once, at freeze)."""
        return self._nodes

    @property
    def apply_nodes(self) -> frozenset:
        return frozenset(self._nodes)

    @property
    def clients(self) -> dict:
        """var -> list of (node, input index), and ("output", k) for outputs; built once."""
        if self._clients is None:
            clients: dict = {v: [] for v in self.inputs}
            for node in self._nodes:
                for i, var in enumerate(node.inputs):
                    clients.setdefault(var, []).append((node, i))
                for out in node.outputs:
                    clients.setdefault(out, [])
            for k, out in enumerate(self.outputs):
                clients.setdefault(out, []).append(("output", k))
            object.__setattr__(self, "_clients", clients)
        return self._clients

    def constants(self) -> list[Constant]:
        """The constants the graph reads, in order of first use."""
        seen: dict = {}
        for node in self._nodes:
            for var in node.inputs:
                if isinstance(var, Constant):
                    seen.setdefault(var, None)
        for var in self.outputs:
            if isinstance(var, Constant):
                seen.setdefault(var, None)
        return list(seen)

    def unfreeze(self) -> FunctionGraph:
        """A fresh mutable FunctionGraph with new variables and nodes (constants shared)."""
        memo: dict = {}
        new_inputs = []
        for var in self.inputs:
            memo[var] = new = var.type.make_variable(name=None)
            new_inputs.append(new)
        for node in self._nodes:
            new = Apply(node.op, [memo.get(v, v) for v in node.inputs],
                        [o.type for o in node.outputs])
            for old, nv in zip(node.outputs, new.outputs):
                memo[old] = nv
        return FunctionGraph(new_inputs, [memo.get(v, v) for v in self.outputs])

    def fingerprint(self) -> str:
        """A digest of the structure that is the same in every process, for disk caches."""
        if self._fingerprint is None:
            index: dict = {v: i for i, v in enumerate(self.inputs)}
            keys: dict = {}  # op or type -> its repr'd stable key: big graphs repeat a few ops

            def key_of(obj, make):
                k = keys.get(obj)
                if k is None:
                    k = keys[obj] = repr(make(obj))
                return k

            h = hashlib.sha256()
            h.update(repr(("inputs", [stable_key(v.type) for v in self.inputs])).encode())
            for node in self._nodes:
                refs = []
                for var in node.inputs:
                    if var in index:
                        refs.append(index[var])
                    else:  # constants
                        refs.append(("c", key_of(var.type, stable_key),
                                     hashlib.sha256(var.data.tobytes()).hexdigest()))
                h.update(repr((key_of(node.op, lambda op: op.fingerprint_key()), refs,
                               [key_of(o.type, stable_key) for o in node.outputs],
                               node.position)).encode())
                for out in node.outputs:
                    index[out] = len(index)
            # An output that is a constant is keyed by its bytes, like a constant input (a
            # repr would be truncated for large arrays).
            out_refs = [index[v] if v in index else
                        ("c", stable_key(v.type), hashlib.sha256(v.data.tobytes()).hexdigest())
                        for v in self.outputs]
            h.update(repr(("outputs", out_refs)).encode())
            object.__setattr__(self, "_fingerprint", h.hexdigest())
        return self._fingerprint

    def __reduce__(self):
        # A flat description (no recursion through deep graphs); unpickling re-interns it, so
        # loads(dumps(g)) is made of the very objects of g.
        index = {v: i for i, v in enumerate(self.inputs)}
        spec = []
        for node in self._nodes:
            spec.append((node.op, tuple(index.get(v, v) for v in node.inputs),
                         tuple(o.type for o in node.outputs), node.position))
            for out in node.outputs:
                index[out] = len(index)
        outs = tuple(index.get(v, v) for v in self.outputs)
        return (_rebuild, (tuple(v.type for v in self.inputs), tuple(spec), outs,
                           self.dedup_nodes))

    def __repr__(self):
        return (f"FrozenFunctionGraph({list(self.inputs)} -> {list(self.outputs)}, "
                f"{len(self._nodes)} nodes)")


def _rebuild(input_types, spec, outs, dedup_nodes):
    values = [nominal_input(i, t) for i, t in enumerate(input_types)]
    nodes = []
    for op, refs, out_types, position in spec:
        inputs = tuple(values[r] if isinstance(r, int) else intern_constant(r) for r in refs)
        node = intern_node(op, inputs, out_types, position)
        nodes.append(node)
        values.extend(node.outputs)
    outputs = tuple(values[r] if isinstance(r, int) else intern_constant(r) for r in outs)
    return FrozenFunctionGraph._make(tuple(values[: len(input_types)]), outputs, tuple(nodes),
                                     dedup_nodes)
