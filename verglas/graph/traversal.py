"""Walking graphs: ancestors, toposort, clone and graph_replace (no FunctionGraph needed)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from verglas.graph.basic import Apply, Variable

__all__ = ["ancestors", "toposort", "variables_and_orphans", "clone", "graph_replace",
           "apply_nodes"]


def ancestors(outputs: Iterable[Variable], blockers: Iterable[Variable] = ()) -> list[Variable]:
    """Every variable `outputs` depend on (outputs included), stopping at `blockers`."""
    blocked = set(blockers)
    seen: set[int] = set()
    order: list[Variable] = []
    stack = list(outputs)
    while stack:
        var = stack.pop()
        if id(var) in seen:
            continue
        seen.add(id(var))
        order.append(var)
        if var.owner is not None and var not in blocked:
            stack.extend(reversed(var.owner.inputs))
    return order


def toposort(outputs: Iterable[Variable], blockers: Iterable[Variable] = ()) -> list:
    """Apply nodes between `blockers` and `outputs`, each after the nodes it depends on.

    Iterative (no recursion limit) and deterministic: inputs are visited in order.
    """
    blocked = blockers if isinstance(blockers, (set, frozenset, dict)) else set(blockers)
    done: set = set()
    order: list = []
    for out in outputs:
        if out.owner is None or out in blocked or out.owner in done:
            continue
        stack = [(out.owner, 0)]
        on_stack = {out.owner}
        while stack:
            node, i = stack[-1]
            inputs = node.inputs
            while i < len(inputs):
                var = inputs[i]
                i += 1
                owner = var.owner
                if owner is not None and owner not in done and var not in blocked:
                    if owner in on_stack:
                        raise ValueError(f"cycle in graph at {owner}")
                    stack[-1] = (node, i)
                    stack.append((owner, 0))
                    on_stack.add(owner)
                    break
            else:
                stack.pop()
                on_stack.discard(node)
                done.add(node)
                order.append(node)
    return order


def apply_nodes(outputs: Iterable[Variable], blockers: Iterable[Variable] = ()) -> list:
    """Alias of toposort for readers who want the set of nodes, in a stable order."""
    return toposort(outputs, blockers)


def variables_and_orphans(inputs: Sequence[Variable], outputs: Sequence[Variable]):
    """(all variables between inputs and outputs, root variables that are not inputs)."""
    all_vars = ancestors(outputs, inputs)
    input_ids = {id(v) for v in inputs}
    orphans = [v for v in all_vars if v.owner is None and id(v) not in input_ids]
    return all_vars, orphans


def clone(inputs: Sequence[Variable], outputs: Sequence[Variable], memo: dict | None = None,
          copy_inputs: bool = True):
    """Copy the graph from `inputs` to `outputs`: (new inputs, new outputs, memo old->new)."""
    memo = {} if memo is None else memo
    for var in inputs:
        memo.setdefault(var, var.clone() if copy_inputs else var)
    for node in toposort(outputs, inputs):
        # Roots that are not inputs (constants) are shared; `memo.get(v, v)` rather than
        # `memo.get(v) or v`, since symbolic variables refuse truth tests.
        new = Apply(node.op, [memo.get(v, v) for v in node.inputs],
                    [o.type for o in node.outputs])
        for old, nv in zip(node.outputs, new.outputs):
            nv.name = old.name
            memo[old] = nv
    new_outputs = [memo.get(v, v) for v in outputs]
    return [memo[v] for v in inputs], new_outputs, memo


def graph_replace(outputs: Sequence[Variable], replace: dict) -> list[Variable]:
    """New outputs computing `outputs` with each key of `replace` swapped for its value."""
    for old, new in replace.items():
        if old.type != new.type:
            raise TypeError(
                f"graph_replace: cannot replace {old} of type {old.type} by {new} of type "
                f"{new.type}"
            )
    memo = dict(replace)
    for node in toposort(outputs, list(replace)):
        new_inputs = [memo.get(v, v) for v in node.inputs]
        if all(a is b for a, b in zip(new_inputs, node.inputs)):
            for o in node.outputs:
                memo.setdefault(o, o)
            continue
        new = node.clone_with_new_inputs(new_inputs)
        for old, nv in zip(node.outputs, new.outputs):
            nv.name = old.name
            memo[old] = nv
    return [memo.get(v, v) for v in outputs]
