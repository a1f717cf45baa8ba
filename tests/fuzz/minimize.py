"""Shrinking a failing random program to a smallest one that fails the same way.

Greedy passes, repeated until none helps: keep one output; drop nodes no output needs;
replace a node by a new input holding numpy's value of it (cutting the program above it);
simplify inputs (C layout, shapes known at run time only, fewer elements along an axis,
simpler values). A candidate is kept when it still fails the same way (`Outcome.signature`) in the
same configuration.
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np

from tests.fuzz.check import Config, check, expect
from tests.fuzz.oracle import NumpyXP
from tests.fuzz.program import V, Input, Node, Program, evaluate

__all__ = ["minimize"]


def _fails(program: Program, config: Config, signature: str) -> bool:
    try:
        expected = expect(program, rewrites=config.mode != "reference")
        return check(program, config, expected).signature == signature
    except Exception:  # a candidate the harness cannot even build is not a reduction
        return False


def _remap(arg, mapping):
    if isinstance(arg, V):
        return V(mapping[arg.k])
    if isinstance(arg, list):
        return [_remap(a, mapping) for a in arg]
    return arg


def _used(program: Program) -> set:
    """Value ids the outputs depend on."""
    n_in = len(program.inputs)
    need = set(program.outputs)
    for j in range(len(program.nodes) - 1, -1, -1):
        if n_in + j in need:
            for a in program.nodes[j].args:
                for v in (a if isinstance(a, list) else [a]):
                    if isinstance(v, V):
                        need.add(v.k)
    return need


def _rebuild(program: Program, inputs: list, keep_nodes: list, extra: dict) -> Program:
    """A program with `inputs` (old input ids or new Input objects), the nodes of old ids
    `keep_nodes`, and `extra`: old node ids now read from new inputs (id -> Input)."""
    mapping = {}
    new_inputs = []
    for item in inputs:
        if isinstance(item, int):
            mapping[item] = len(new_inputs)
            new_inputs.append(program.inputs[item])
    for old, inp in extra.items():
        mapping[old] = len(new_inputs)
        new_inputs.append(inp)
    nodes = []
    n_in = len(program.inputs)
    for j in keep_nodes:
        node = program.nodes[j - n_in]
        mapping[j] = len(new_inputs) + len(nodes)
        nodes.append(Node(node.method, tuple(_remap(a, mapping) for a in node.args),
                          dict(node.kwargs)))
    return Program(program.seed, new_inputs, nodes, [mapping[o] for o in program.outputs])


def _pruned(program: Program) -> Program:
    need = _used(program)
    n_in = len(program.inputs)
    inputs = [k for k in range(n_in) if k in need]
    nodes = [n_in + j for j in range(len(program.nodes)) if n_in + j in need]
    if not inputs and nodes:  # a program needs at least one input
        inputs = [0]
    return _rebuild(program, inputs, nodes, {})


def _values(program: Program):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return evaluate(program.nodes, NumpyXP(), [i.value for i in program.inputs])


def _cut(program: Program, j: int):
    """`program` with node value j read from a new input (numpy's value of it)."""
    try:
        value = np.asarray(_values(program)[j])
    except Exception:
        return None
    n_in = len(program.inputs)
    keep = [n_in + i for i in range(len(program.nodes)) if n_in + i != j]
    inp = Input(value, (None,) * value.ndim, "C")
    return _pruned(_rebuild(program, list(range(n_in)), keep, {j: inp}))


def _input_variants(program: Program, k: int):
    """Simpler versions of input k."""
    inp = program.inputs[k]
    a = inp.value
    if inp.layout != "C":
        yield dataclasses.replace(inp, layout="C")
    if any(s is not None for s in inp.static):
        yield dataclasses.replace(inp, static=(None,) * a.ndim)
    for axis in range(a.ndim):
        n = a.shape[axis]
        if n > 1:
            for keep in (1, n // 2):
                if keep < n:
                    idx = [slice(None)] * a.ndim
                    idx[axis] = slice(0, keep)
                    static = list(inp.static)
                    if static[axis] is not None:
                        static[axis] = keep
                    yield Input(np.ascontiguousarray(a[tuple(idx)]), tuple(static), inp.layout)
    if a.size > 1 and a.dtype.kind != "b":
        flat = a.reshape(-1)
        yield dataclasses.replace(inp, value=np.full_like(a, flat[0]))
    if a.size and a.dtype.kind in "fc":
        yield dataclasses.replace(inp, value=np.round(np.nan_to_num(a.real)).astype(a.dtype))


def minimize(program: Program, config: Config, signature: str, budget: int = 200) -> Program:
    """A smaller program that still fails `config` the same way (Outcome.signature), in at
    most `budget` tries."""
    tries = 0

    def attempt(candidate):
        nonlocal tries
        if candidate is None or tries >= budget:
            return False
        tries += 1
        return _fails(candidate, config, signature)

    best = program
    if len(best.outputs) > 1:
        for o in best.outputs:
            cand = _pruned(dataclasses.replace(best, outputs=[o]))
            if attempt(cand):
                best = cand
                break
    cand = _pruned(best)
    if cand.value_count() < best.value_count() and attempt(cand):
        best = cand
    changed = True
    while changed and tries < budget:
        changed = False
        n_in = len(best.inputs)
        for j in range(n_in, best.value_count()):
            if j in best.outputs:
                continue
            cand = _cut(best, j)
            if cand is not None and cand.value_count() <= best.value_count() and attempt(cand):
                best, changed = cand, True
                break
        if changed:
            continue
        for k in range(len(best.inputs)):
            for variant in _input_variants(best, k):
                inputs = list(best.inputs)
                inputs[k] = variant
                cand = dataclasses.replace(best, inputs=inputs)
                if attempt(cand):
                    best, changed = cand, True
                    break
            if changed:
                break
    return best
