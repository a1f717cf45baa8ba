"""Building a Scan from a Python step function: `scan_buffers` (what `vg.scan` and the
gradient's backward loop call), its parsing of sequences and outputs_info, and `until`."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from verglas.graph.basic import Constant, Variable
from verglas.graph.traversal import ancestors, graph_replace
from verglas.graph.types import TensorType
from verglas.ops.basic import as_tensor, constant, shape_i, shape_str
from verglas.ops.math import minimum, neq
from verglas.ops.scan.op import Scan, ScanLayout

__all__ = ["scan_buffers", "until", "SIT_SOT", "MIT_SOT", "NIT_SOT"]


# -- building a Scan from a step function ---------------------------------------------------------
SIT_SOT, MIT_SOT, NIT_SOT = "sit-sot", "mit-sot", "nit-sot"  # the kinds of outputs_info entries


def _as_list(value) -> list:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


def _taps(value, what: str) -> tuple[int, ...]:
    taps = tuple(int(t) for t in _as_list(value))
    if not taps or len(set(taps)) != len(taps):
        raise ValueError(f"scan: {what} taps {list(taps)} must be a non-empty list of distinct "
                         f"ints")
    return taps


def _sequences(sequences) -> list[tuple[Variable, tuple[int, ...]]]:
    seqs = []
    for j, entry in enumerate(_as_list(sequences)):
        if isinstance(entry, Mapping):
            unknown = set(entry) - {"input", "taps"}
            if unknown or "input" not in entry:
                raise ValueError(f"scan: sequence {j} must be a variable or dict(input=..., "
                                 f"taps=[...]), got keys {sorted(entry)}")
            x, taps = as_tensor(entry["input"]), _taps(entry.get("taps", [0]), f"sequence {j}")
        else:
            x, taps = as_tensor(entry), (0,)
        if x.ndim == 0:
            raise ValueError(f"scan: sequence {j} is 0-d; sequences are iterated over axis 0")
        seqs.append((x, taps))
    return seqs


def _outputs_info(outputs_info) -> list[tuple[str, Variable | None, tuple[int, ...]]]:
    """(kind, initial value, taps) per entry of outputs_info."""
    infos = []
    for k, entry in enumerate(_as_list(outputs_info)):
        if isinstance(entry, Mapping):
            unknown = set(entry) - {"initial", "taps"}
            if unknown:
                raise ValueError(f"scan: outputs_info[{k}] has unknown keys {sorted(unknown)}")
            init = entry.get("initial")
            if init is None:
                infos.append((NIT_SOT, None, ()))
                continue
            taps = _taps(entry.get("taps", [-1]), f"outputs_info[{k}]")
            if max(taps) >= 0:
                raise ValueError(f"scan: outputs_info[{k}] taps {list(taps)} must be negative "
                                 f"(past values)")
            init = as_tensor(init)
            if taps == (-1,):
                infos.append((SIT_SOT, init, taps))
                continue
            if init.ndim == 0:
                raise ValueError(f"scan: outputs_info[{k}] with taps {list(taps)} needs an "
                                 f"initial value with a leading axis of length {-min(taps)}")
            n = init.type.shape[0]
            if n is not None and n != -min(taps):
                raise ValueError(f"scan: outputs_info[{k}] has an initial value of leading "
                                 f"length {n}, taps {list(taps)} need {-min(taps)}")
            infos.append((MIT_SOT, init, taps))
        elif entry is None:
            infos.append((NIT_SOT, None, ()))
        else:
            infos.append((SIT_SOT, as_tensor(entry), (-1,)))
    return infos


def _n_steps(n_steps, seqs):
    if n_steps is not None:
        if isinstance(n_steps, Variable):
            n = as_tensor(n_steps)
            if n.ndim != 0 or np.dtype(n.dtype).kind not in "iu":
                raise TypeError(f"scan: n_steps must be an int or a 0-d integer variable, got "
                                f"{n.type}")
            return n
        if isinstance(n_steps, bool) or int(n_steps) != n_steps or n_steps < 0:
            raise ValueError(f"scan: n_steps must be a non-negative int, got {n_steps!r}")
        return constant(int(n_steps), "int64")
    if not seqs:
        raise ValueError("scan: n_steps is needed when there are no sequences")
    lengths = []
    for x, taps in seqs:
        span = max(taps) - min(taps)
        static = x.type.shape[0]
        if static is not None:
            lengths.append(static - span)
        else:
            lengths.append(shape_i(x, 0) - span if span else shape_i(x, 0))
    if all(isinstance(n, int) for n in lengths):
        return constant(max(min(lengths), 0), "int64")
    n = lengths[0]
    for other in lengths[1:]:
        n = minimum(n, other)
    return n


def _join(a: TensorType, b: TensorType) -> TensorType:
    """The least specific of two types of one dtype and ndim: None where they differ."""
    return a.clone(shape=tuple(x if x == y else None for x, y in zip(a.shape, b.shape)))


def _state_entry_type(kind: str, init: Variable) -> TensorType:
    t = init.type
    return t if kind == SIT_SOT else TensorType(t.dtype, t.shape[1:])


def scan_buffers(fn, sequences=None, outputs_info=None, non_sequences=None, n_steps=None,
                 backwards: bool = False):
    """Like `scan`, but returns (the Scan's outputs in outputs_info order, with the initial
    values in front of each state's steps, and the parsed outputs_info); `backwards`: the
    layout's (step t reads sequence row n - 1 - t and writes nit-sot row n - 1 - t)."""
    seqs = _sequences(sequences)
    infos = _outputs_info(outputs_info)
    explicit_infos = outputs_info is not None
    non_seqs = [as_tensor(v) for v in _as_list(non_sequences)]
    n = _n_steps(n_steps, seqs)

    seq_vars = [[TensorType(x.dtype, x.type.shape[1:]).make_variable(_tap_name(x, "t", tap))
                 for tap in taps] for x, taps in seqs]
    state_types = [_state_entry_type(kind, init) if kind != NIT_SOT else None
                   for kind, init, _ in infos]
    # A state's type is what its initial value and every step's output have in common: start
    # from the initial value and relax it (then rebuild the step) until the step output fits.
    while True:
        state_vars = [[t.make_variable(f"{_out_name(k)}[t{tap:+d}]") for tap in taps]
                      if t is not None else [] for k, (t, (_, _, taps)) in
                      enumerate(zip(state_types, infos))]
        non_seq_vars = [v.type.make_variable(v.name) for v in non_seqs]
        args = [v for group in seq_vars for v in group]
        args += [v for group in state_vars for v in group]
        result, cond = _split_until(fn(*args, *non_seq_vars))
        outs = _step_outputs(result, infos, explicit_infos)
        if not explicit_infos:
            infos = [(NIT_SOT, None, ())] * len(outs)
            state_types = [None] * len(outs)
        relaxed = _relaxed_state_types(outs, infos, state_types)
        if relaxed == state_types:
            break
        state_types = relaxed

    # Outer variables the step function reads directly become extra non-sequences.
    placeholders = set(args) | set(non_seq_vars)
    by_outer = dict(zip(non_seqs, non_seq_vars))
    replace = {}
    outs = outs + ([cond] if cond is not None else [])  # (the condition last)
    for var in ancestors(outs, placeholders | set(non_seqs)):
        if var in placeholders or var in replace or isinstance(var, Constant):
            continue
        if var in by_outer:
            replace[var] = by_outer[var]
        elif var.owner is None:
            non_seqs.append(var)
            replace[var] = by_outer[var] = var.type.make_variable(var.name)
            non_seq_vars.append(replace[var])
    if replace:
        outs = graph_replace(outs, replace)

    mit = [k for k, (kind, _, _) in enumerate(infos) if kind == MIT_SOT]
    sit = [k for k, (kind, _, _) in enumerate(infos) if kind == SIT_SOT]
    nit = [k for k, (kind, _, _) in enumerate(infos) if kind == NIT_SOT]
    order = mit + sit + nit  # layout position -> outputs_info index
    layout = ScanLayout(
        seq_offsets=tuple(tuple(t - min(taps) for t in taps) for _, taps in seqs),
        mit_sot_taps=tuple(infos[k][2] for k in mit),
        n_sit_sot=len(sit),
        n_nit_sot=len(nit),
        n_non_seqs=len(non_seqs),
        until=cond is not None,
        backwards=backwards,
    )
    inner_inputs = [v for group in seq_vars for v in group]
    inner_inputs += [v for k in mit + sit for v in state_vars[k]]
    inner_inputs += non_seq_vars
    op = Scan(inner_inputs, [outs[k] for k in order] + outs[len(infos):], layout)
    inits = [infos[k][1] for k in mit + sit]
    results = op(n, *[x for x, _ in seqs], *inits, *non_seqs)
    results = [results] if isinstance(results, Variable) else results
    by_info: list = [None] * len(infos)
    for pos, k in enumerate(order):
        by_info[k] = results[pos]
    return by_info, infos


def _tap_name(x, prefix, tap) -> str | None:
    return f"{x.name}[{prefix}{tap:+d}]" if x.name else None


def _out_name(k: int) -> str:
    return f"out{k}"


class until:  # noqa: N801 - a marker users write as a function, as in PyTensor
    """The stopping condition of a loop: a step returns `(outputs, vg.until(cond))` and the
    loop stops after the first step whose `cond` (a 0-d value, true when nonzero) is true."""

    def __init__(self, condition):
        cond = as_tensor(condition)
        if cond.ndim != 0:
            raise ValueError(f"until: the condition must be 0-d, got shape "
                             f"{shape_str(cond.type.shape)}")
        self.condition = cond if cond.dtype == "bool" else neq(cond, 0)

    def __repr__(self):
        return f"until({self.condition!r})"


def _split_until(result):
    """(the step's outputs, its stopping condition or None) from what a step returned."""
    if isinstance(result, until):
        raise ValueError("scan: the step function returned a stopping condition and no output")
    if isinstance(result, (list, tuple)) and result and isinstance(result[-1], until):
        outs = result[0] if len(result) == 2 else list(result[:-1])
        return outs, result[-1].condition
    if isinstance(result, (list, tuple)) and any(isinstance(r, until) for r in result):
        raise ValueError("scan: vg.until(...) must come last in what the step function returns")
    return result, None


def _step_outputs(result, infos, explicit: bool) -> list[Variable]:
    outs = list(result) if isinstance(result, (list, tuple)) else [result]
    if explicit and len(outs) != len(infos):
        raise ValueError(f"scan: the step function returned {len(outs)} output"
                         f"{'s' if len(outs) != 1 else ''}, but outputs_info has {len(infos)} "
                         f"entr{'ies' if len(infos) != 1 else 'y'}")
    if not outs:
        raise ValueError("scan: the step function returned no output")
    converted = []
    for k, out in enumerate(outs):
        try:
            converted.append(as_tensor(out))
        except TypeError:
            raise TypeError(f"scan: output {k} of the step function is {out!r}, not an array")
    return converted


def _relaxed_state_types(outs, infos, state_types) -> list:
    relaxed = []
    for k, (out, (kind, init, _), t) in enumerate(zip(outs, infos, state_types)):
        if kind == NIT_SOT:
            relaxed.append(None)
            continue
        if out.dtype != t.dtype or out.ndim != t.ndim:
            raise TypeError(
                f"scan: output {k} of the step function has type {out.type}, but its state "
                f"(outputs_info[{k}], {kind}) has type {t}: the step must return the dtype "
                f"and ndim of the initial value")
        relaxed.append(_join(t, out.type))
    return relaxed
