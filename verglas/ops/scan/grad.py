"""The gradient of a Scan: a backward Scan built by `scan_buffers`, and the pruning that keeps
a gradient's loops to what the requested gradients need."""

from __future__ import annotations

import numpy as np

from verglas.graph.basic import Constant, Variable
from verglas.graph.traversal import graph_replace, toposort
from verglas.ops.autodiff import vjp
from verglas.ops.basic import DimShuffle, ShapeI, shape_i, stack
from verglas.ops.elemwise import Elemwise
from verglas.ops.indexing import IncSubtensor, inc_subtensor
from verglas.ops.math import cast, sub, zeros_like
from verglas.ops.op_from_graph import rebuild_graph
from verglas.ops.scalar import Second
from verglas.ops.scan.build import scan_buffers
from verglas.ops.scan.op import Scan

__all__ = ["scan_grad", "without_unused_outputs"]


# -- the gradient: a backward Scan ---------------------------------------------------------------
# Reverse-mode gradient of a Scan: a backward Scan over the reversed steps.
#
# The backward loop visits the forward steps last to first. Its sequences are the cotangents
# of the step outputs, the forward sequence slices and the forward state taps (read from the
# forward buffers, so nothing is recomputed across steps). It runs in the other direction than
# the forward loop (layout `backwards`), so its step s reads the sequence rows forward step
# n - 1 - s read, in place, and writes its sequence gradients in the sequences' order; only the
# states, whose entries follow the steps, are read through reversed windows when the forward
# loop itself ran backwards. Its body is the
# vector-Jacobian product of the forward body. A state with taps down to -k carries a window of
# k accumulators (the gradient owed to each of its k most recent entries: PyTensor's mit-mot,
# here as sit-sot carries); each differentiable non-sequence carries its running sum. Sequence
# gradients are the backward loop's nit-sot outputs, added back at their offsets.
def without_unused_outputs(outputs: list, keep=()) -> list:
    """`outputs` computed by graphs whose Scans compute only what they need: each Scan node
    whose outputs are not all read (by the graph or as `outputs`) is restricted to those
    that are (Scan.restrict), once per node, but for the nodes of `keep` (the forward graph,
    which other outputs read as it is). `grad` cleans its pullback with it, so a gradient's
    backward loop carries no dead output."""
    outputs = list(outputs)
    done: set = set(keep)
    while True:
        nodes = toposort(outputs)
        read = set(outputs) | {v for n in nodes for v in n.inputs}
        for node in nodes:
            if not isinstance(node.op, Scan) or node in done:
                continue
            done.add(node)
            restricted = node.op.restrict([k for k, o in enumerate(node.outputs) if o in read])
            if restricted is None:
                continue
            new_op, in_idx, out_idx = restricted
            new = new_op.make_node(*[node.inputs[i] for i in in_idx])
            outputs = graph_replace(outputs, {node.outputs[k]: v
                                              for k, v in zip(out_idx, new.outputs)})
            break
        else:
            return outputs


def _without_unused_inputs(outputs: list) -> list:
    """The outputs of a Scan node (all of them) from a Scan without the inputs they do not
    read."""
    node = outputs[0].owner
    restricted = node.op.restrict(range(len(node.outputs)))
    if restricted is None:
        return outputs
    new_op, in_idx, _ = restricted
    new = new_op(*[node.inputs[i] for i in in_idx])
    return [new] if isinstance(new, Variable) else list(new)


def _is_float(t) -> bool:
    return np.dtype(t.dtype).kind in "fc"


def _steps_cotangent(g, k: int) -> tuple:
    """(the cotangent of a state output's entries from `k` on, True) when `g` is that added
    into zeros (the gradient of `out[k:]`, of those entries' shape as every gradient has its
    variable's: the entries before `k` get none), else (None, False)."""
    inc = g.owner
    if (inc is None or not isinstance(inc.op, IncSubtensor) or inc.op.set_instead_of_inc
            or inc.op.idx_list != (("slice", True, False, False),)
            or not isinstance(inc.inputs[2], Constant) or int(inc.inputs[2].data) != k
            or inc.inputs[1].ndim != g.ndim or inc.inputs[1].dtype != g.dtype):
        return None, False
    base = inc.inputs[0].owner
    if base is None or not (isinstance(base.op, Elemwise)
                            and isinstance(base.op.scalar_op, Second)):
        return None, False
    fill = base.inputs[1]
    while fill.owner is not None and isinstance(fill.owner.op, DimShuffle):
        fill = fill.owner.inputs[0]  # (a 0-d zero broadcast to the rank)
    zero = isinstance(fill, Constant) and not np.any(fill.data)
    return (inc.inputs[1], True) if zero else (None, False)


def _window(x, start: int, n, reverse: bool = False):
    """x[start : start + n], reversed when `reverse` (entry i is x[start + n - 1 - i])."""
    return x[start:start + n][::-1] if reverse else x[start:start + n]


def _is_length_of(n, x) -> bool:
    """Whether the step count `n` is `x.shape[0]` by construction (a sequence's own length)."""
    owner = n.owner
    return owner is not None and isinstance(owner.op, ShapeI) and owner.op.i == 0 \
        and owner.inputs[0] is x


def scan_grad(op, inputs, outputs, output_grads) -> list:
    """Gradients of a Scan node's outer inputs given its outputs' cotangents."""
    lay = op.layout
    n, n_seqs, n_mit, n_states = inputs[0], lay.n_seqs, lay.n_mit_sot, lay.n_states
    seqs = inputs[1:1 + n_seqs]
    inits = inputs[1 + n_seqs:1 + n_seqs + n_states]
    non_seqs = inputs[1 + n_seqs + n_states:]
    lengths = lay.mit_sot_lengths + (1,) * lay.n_sit_sot
    if lay.until:  # the backward loop runs over the steps that ran
        n = shape_i(outputs[0], 0)
        n = sub(n, lengths[0]) if n_states else n
    state_taps = lay.state_taps
    out_types = [o.type for o in outputs]
    grads_out = [g if g.dtype == t.dtype else cast(g, t.dtype)
                 for g, t in zip(output_grads, out_types)]

    f_states = [q for q in range(n_states) if _is_float(op.state_types[q])]
    f_nits = [i for i in range(lay.n_nit_sot) if _is_float(op.inner_output_types[n_states + i])]
    f_seqs = [j for j in range(n_seqs) if _is_float(seqs[j].type)]
    f_non_seqs = [w for w in range(lay.n_non_seqs) if _is_float(non_seqs[w].type)]
    if not (f_seqs or f_non_seqs or f_states) or not (f_states or f_nits):
        return [None] * len(inputs)

    # backward sequences, in the sequences' order (the backward loop runs the other way):
    # step-output cotangents, then the forward body's inputs; a state's entries follow the
    # forward steps, which ran backwards over the sequences when `flip`
    flip = lay.backwards
    # a state's cotangent is mostly the gradient of `out[k:]` (the steps, as vg.scan returns
    # them) added into zeros: read that gradient itself (no zeros of the whole trace)
    tails = {q: _steps_cotangent(grads_out[q], lengths[q]) for q in f_states}
    b_seqs = [(tails[q][0][::-1] if flip else tails[q][0]) if tails[q][1]
              else _window(grads_out[q], lengths[q], n, flip) for q in f_states]
    b_seqs += [grads_out[n_states + i] for i in f_nits]
    b_seqs += [_window(x, o, n) for x, offs in zip(seqs, lay.seq_offsets) for o in offs]
    b_seqs += [_window(outputs[q], lengths[q] + tap, n, flip)
               for q in range(n_states) for tap in state_taps[q]]
    # what each forward step computed (its state and nit-sot outputs): the body's vjp reads
    # them rather than computing them again (tanh' from tanh's output: the forward step's
    # matmuls are not redone); the sequences it does not read go again below
    b_seqs += [_window(outputs[q], lengths[q], n, flip) for q in range(n_states)]
    b_seqs += [outputs[n_states + i] for i in range(lay.n_nit_sot)]
    carries = [zeros_like(inits[q][0] if q < n_mit else inits[q])
               for q in f_states for _ in range(lengths[q])]
    carries += [zeros_like(non_seqs[w]) for w in f_non_seqs]
    n_dx = sum(len(lay.seq_offsets[j]) for j in f_seqs)

    def step(*args):
        it = iter(args)
        g_states = [next(it) for _ in f_states]
        g_nits = [next(it) for _ in f_nits]
        x_vals = [[next(it) for _ in offs] for offs in lay.seq_offsets]
        tap_vals = [[next(it) for _ in taps] for taps in state_taps]
        computed = [next(it) for _ in range(lay.n_outputs)]
        windows = [[next(it) for _ in range(lengths[q])] for q in f_states]
        sums = [next(it) for _ in f_non_seqs]
        ws = [next(it) for _ in non_seqs]
        outs = rebuild_graph(op.fgraph, [v for g in x_vals for v in g]
                             + [v for g in tap_vals for v in g] + ws)
        cotangents: list = [None] * len(outs)
        for g, window, q in zip(g_states, windows, f_states):
            cotangents[q] = g + window[0]
        for g, i in zip(g_nits, f_nits):
            cotangents[n_states + i] = g
        wrt = [v for j in f_seqs for v in x_vals[j]]
        wrt += [v for q in f_states for v in tap_vals[q]] + [ws[w] for w in f_non_seqs]
        grads = vjp(outs, cotangents, wrt)
        grads = [zeros_like(v) if g is None else g for v, g in zip(wrt, grads)]
        dxs, grads = grads[:n_dx], grads[n_dx:]
        new_windows = []
        for window, q in zip(windows, f_states):
            taps = state_taps[q]
            owed = dict(zip(taps, grads[:len(taps)]))
            grads = grads[len(taps):]
            # shift the window by one entry: what was owed to entry t-1-j, plus this step's
            for j in range(lengths[q]):
                parts = [p for p in (window[j + 1] if j + 1 < len(window) else None,
                                     owed.get(-(j + 1))) if p is not None]
                new_windows.append(sum(parts[1:], parts[0]) if parts else zeros_like(window[j]))
        results = [*new_windows, *[s + g for s, g in zip(sums, grads)], *dxs]
        placeholders = set(args)
        stored = {out: value for out, value in zip(outs, computed)
                  if out.owner is not None and out not in placeholders
                  and out.type == value.type}
        return graph_replace(results, stored) if stored else results

    buffers, _ = scan_buffers(step, sequences=b_seqs,
                              outputs_info=[*carries, *[None] * n_dx],
                              non_sequences=list(non_seqs), n_steps=n, backwards=not flip)
    buffers = _without_unused_inputs(buffers)
    finals = [b[-1] for b in buffers[:len(carries)]]
    dxs = buffers[len(carries):]

    result: list = [None] * len(inputs)
    k = 0
    for j in f_seqs:
        if lay.seq_offsets[j] == (0,) and not lay.until and _is_length_of(n, seqs[j]):
            result[1 + j] = dxs[k]  # one row per step, the sequence's every row
            k += 1
            continue
        dx = zeros_like(seqs[j])
        for o in lay.seq_offsets[j]:
            dx = inc_subtensor(dx[o:o + n], dxs[k])
            k += 1
        result[1 + j] = dx
    k = 0
    for q in f_states:
        window, k = finals[k:k + lengths[q]], k + lengths[q]
        g, steps_only = grads_out[q], tails[q][1]
        if q < n_mit:  # entry r of the initial value is owed window[k - 1 - r]
            rows = [window[lengths[q] - 1 - r] if steps_only else
                    g[r] + window[lengths[q] - 1 - r] for r in range(lengths[q])]
            result[1 + n_seqs + q] = stack(rows)
        else:
            result[1 + n_seqs + q] = window[0] if steps_only else g[0] + window[0]
    for w, total in zip(f_non_seqs, finals[k:]):
        result[1 + n_seqs + n_states + w] = total
    return result
