"""Elementwise fusion: connected Elemwise nodes become one `Elemwise(Composite)` node.

One pass over the graph in reverse topological order. Each Elemwise node not yet in a group
starts one and grows it towards its inputs, producers in decreasing topological position
(a max-heap), so that when a producer is considered every later member is already known.
A producer joins when

- its outputs are read only by members, by graph outputs, or by nodes after the group's root
  in topological order (those cannot lie on a path back into the group: no cycle is made);
  outputs read outside the group become extra outputs of the Composite, never recomputed;
- its broadcast pattern (which axes are statically 1) is the root's, so no value is computed
  at a larger shape than it has; an output read outside must even have provably the same
  run-time shape as the root's (see `dim_keys`);
- the group stays within MAX_INPUTS distinct inputs and MAX_SCALAR_NODES scalar nodes.

Constants of one element that broadcast everywhere (also through a DimShuffle that only adds
axes) become scalar constants of the Composite's graph. A value used twice inside a group is
computed once: freezing the scalar graph interns equal nodes. Composites met on the way are
inlined, so fused graphs are flat, and two structurally identical groups build equal
Composites (inputs and outputs are ordered by the group's structure, not by object identity).

Tagged "fast_run" only: "fast_compile" skips fusion (it costs rewrite time to save run time).
"""

from __future__ import annotations

import heapq

from verglas.graph import (Apply, Constant, InconsistencyError, OUTPUT, ScalarType, TensorType,
                           Variable)
from verglas.ops.basic import DimShuffle
from verglas.ops.composite import Composite
from verglas.ops.elemwise import Elemwise, broadcast_static_shape
from verglas.ops.op_from_graph import rebuild_graph
from verglas.rewrite.engine import graph_rewriter
from verglas.rewrite.registry import register

__all__ = ["MAX_INPUTS", "MAX_SCALAR_NODES", "dim_keys", "elemwise_fusion",
           "scalar_constant_value"]

MAX_INPUTS = 32  # distinct array inputs of one fused node (kernel argument limits, registers)
MAX_SCALAR_NODES = 256  # scalar nodes of one Composite (bounds the generated loop body)
_SCALAR_TYPES: dict = {}


def _scalar_type(dtype: str) -> ScalarType:
    t = _SCALAR_TYPES.get(dtype)
    if t is None:
        t = _SCALAR_TYPES[dtype] = ScalarType(dtype)
    return t


def _fusable(node) -> bool:
    op = node.op
    return type(op) is Elemwise and not op.inplace_pattern


def scalar_constant_value(var):
    """The 0-d value of `var` when it is a one-element constant broadcastable on every axis
    (directly or through a DimShuffle that only adds axes), else None."""
    shape = var.type.shape
    if shape.count(1) != len(shape):
        return None
    if isinstance(var, Constant):
        return var.data.reshape(()) if var.data.size == 1 else None
    owner = var.owner
    if (owner is not None and type(owner.op) is DimShuffle
            and isinstance(owner.inputs[0], Constant) and owner.inputs[0].data.size == 1):
        return owner.inputs[0].data.reshape(())
    return None


def dim_keys(var, memo: dict) -> tuple:
    """Per axis of `var`, what its run-time length is made of: the static length when known,
    else the set of (variable, axis) leaves whose lengths broadcast into it through Elemwise
    nodes. Two variables with equal keys have the same run-time shape."""
    found = memo.get(var)
    if found is not None:
        return found
    stack = [var]
    while stack:
        v = stack[-1]
        if v in memo:
            stack.pop()
            continue
        owner = v.owner
        shape = v.type.shape
        if owner is None or not isinstance(owner.op, Elemwise):
            memo[v] = tuple(s if s is not None else frozenset({(v, a)})
                            for a, s in enumerate(shape))
            stack.pop()
            continue
        missing = [i for i in owner.inputs if i not in memo]
        if missing:
            stack.extend(missing)
            continue
        keys = []
        for a, s in enumerate(shape):
            if s is not None:
                keys.append(s)
                continue
            leaves = frozenset()
            for i in owner.inputs:
                if i.type.shape[a] != 1:
                    k = memo[i][a]
                    leaves = leaves | (k if isinstance(k, frozenset) else frozenset())
            keys.append(leaves)
        memo[v] = tuple(keys)
        stack.pop()
    return memo[var]


def _scalar_size(node) -> int:
    inner = getattr(node.op.scalar_op, "fgraph", None)
    return 1 if inner is None else len(inner.toposort())


class _Group:
    """A root node and the producers fused into it."""

    __slots__ = ("root", "members", "absorbed")

    def __init__(self, root):
        self.root = root
        self.members = {root}
        self.absorbed = False  # a DimShuffle of a constant folds into the scalar graph


def _grow(root, pos: dict, clients: dict, claimed: set, memo: dict) -> _Group:
    """The group rooted at `root` (see the module docstring for who may join)."""
    group = _Group(root)
    members = group.members
    root_pos = pos[root]
    out0 = root.outputs[0]
    pattern = tuple(s == 1 for s in out0.type.shape)
    external: set = set()  # distinct array inputs of the group so far
    size = _scalar_size(root)
    heap: list = []
    pushed: set = set()

    def take_inputs(node):
        for v in node.inputs:
            if scalar_constant_value(v) is not None:
                group.absorbed |= v.owner is not None
                continue
            external.add(v)
            owner = v.owner
            if (owner is not None and owner not in pushed and owner not in claimed
                    and _fusable(owner)):
                pushed.add(owner)
                heapq.heappush(heap, (-pos[owner], owner))

    def added_inputs(node) -> int:
        new = set()
        for v in node.inputs:
            if v not in external and scalar_constant_value(v) is None:
                new.add(v)
        return len(new)

    take_inputs(root)
    while heap:
        _, node = heapq.heappop(heap)
        outs = node.outputs
        if tuple(s == 1 for s in outs[0].type.shape) != pattern:
            continue
        escapes = False
        ok = True
        for out in outs:
            for client, _ in clients[out]:
                if client in members:
                    continue
                if client == OUTPUT or pos[client] > root_pos:
                    escapes = True
                    continue
                ok = False  # read before the root by a non-member: joining could make a cycle
                break
            if not ok:
                break
        if not ok:
            continue
        if escapes and dim_keys(outs[0], memo) != dim_keys(out0, memo):
            continue
        n_inputs = len(external) - sum(1 for o in outs if o in external) + added_inputs(node)
        node_size = _scalar_size(node)
        if n_inputs > MAX_INPUTS or size + node_size > MAX_SCALAR_NODES:
            continue
        members.add(node)
        size += node_size
        external.difference_update(outs)
        take_inputs(node)
    return group


def _members_in_order(group: _Group) -> list:
    """The members in post-order from the root's inputs: an order fixed by the structure."""
    members, order, done = group.members, [], set()
    stack = [(group.root, 0)]
    while stack:
        node, k = stack.pop()
        inputs = node.inputs
        while k < len(inputs):
            owner = inputs[k].owner
            k += 1
            if owner in members and owner not in done:
                stack.append((node, k))
                stack.append((owner, 0))
                break
        else:
            if node not in done:
                done.add(node)
                order.append(node)
    return order


def _fused_node(group: _Group, clients: dict):
    """(new Apply, [(old variable, new variable)]) for `group`, or None when it cannot be."""
    order = _members_in_order(group)
    members = group.members
    svars: dict = {}
    inputs = []
    for node in order:
        for v in node.inputs:
            if v not in svars and (v.owner not in members) and scalar_constant_value(v) is None:
                svars[v] = Variable(_scalar_type(v.dtype))
                inputs.append(v)
    if not inputs:
        return None  # only constants: constant folding's business
    escaping = []
    for node in order:
        ins = []
        for v in node.inputs:
            if v in svars:
                ins.append(svars[v])
            else:
                ins.append(Constant(_scalar_type(v.dtype), scalar_constant_value(v)))
        sop = node.op.scalar_op
        inner = getattr(sop, "fgraph", None)
        if isinstance(sop, Composite) and inner is not None:
            outs = rebuild_graph(inner, ins)
        else:
            outs = Apply(sop, ins, [_scalar_type(o.dtype) for o in node.outputs]).outputs
        for out, s in zip(node.outputs, outs):
            svars[out] = s
            if any(c == OUTPUT or c not in members for c, _ in clients[out]):
                escaping.append(out)
    composite = Composite.from_variables([svars[v] for v in inputs],
                                         [svars[v] for v in escaping])
    # the types make_node would give (it would also build a repr for its error messages)
    shape = broadcast_static_shape([v.type.shape for v in inputs], "elemwise_fusion")
    new = Apply(Elemwise(composite), inputs, [TensorType(v.dtype, shape) for v in escaping])
    pairs = []
    for old, var in zip(escaping, new.outputs):
        if old.type != var.type and not old.type.is_super(var.type):
            return None
        pairs.append((old, var))
    return new, pairs


@register(phase="fusion", tags=("fast_run",))
@graph_rewriter
def elemwise_fusion(fgraph) -> None:
    """Fuse connected Elemwise nodes into Elemwise(Composite) nodes, in one pass."""
    order = fgraph.toposort()
    pos = {node: k for k, node in enumerate(order)}
    clients = fgraph.clients
    claimed: set = set()
    memo: dict = {}
    groups = []
    for node in reversed(order):
        if node in claimed or not _fusable(node):
            continue
        group = _grow(node, pos, clients, claimed, memo)
        claimed.update(group.members)
        if len(group.members) > 1 or group.absorbed:
            groups.append(group)
    replace = getattr(fgraph, "replace_all_validate", None) or fgraph.replace_all
    for group in groups:
        built = _fused_node(group, clients)
        if built is None:
            continue
        _, pairs = built
        try:
            replace(pairs, reason="elemwise_fusion")
        except InconsistencyError:
            continue
