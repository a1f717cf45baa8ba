"""Reverse-mode gradient of a Scan: a backward Scan over the reversed steps.

The backward loop visits the forward steps last to first. Its sequences are the reversed
cotangents of the step outputs, the forward sequence slices and the forward state taps (read
from the forward buffers, so nothing is recomputed across steps); its body is the
vector-Jacobian product of the forward body. A state with taps down to -k carries a window of
k accumulators (the gradient owed to each of its k most recent entries: PyTensor's mit-mot,
here as sit-sot carries); each differentiable non-sequence carries its running sum. Sequence
gradients are the backward loop's nit-sot outputs, added back at their offsets.
"""

from __future__ import annotations

import numpy as np

from verglas.ops.op_from_graph import rebuild_graph

__all__ = ["scan_grad"]


def _is_float(t) -> bool:
    return np.dtype(t.dtype).kind in "fc"


def _reversed_window(x, start: int, n):
    """x[start : start + n] reversed: entry i is x[start + n - 1 - i]."""
    return x[start:start + n][::-1]


def scan_grad(op, inputs, outputs, output_grads) -> list:
    """Gradients of a Scan node's outer inputs given its outputs' cotangents."""
    from verglas.grad import vjp
    from verglas.ops.indexing import inc_subtensor
    from verglas.ops.math import cast, zeros_like
    from verglas.ops.scan.basic import scan_buffers
    from verglas.ops.shape import stack

    lay = op.layout
    n, n_seqs, n_mit, n_states = inputs[0], lay.n_seqs, lay.n_mit_sot, lay.n_states
    seqs = inputs[1:1 + n_seqs]
    inits = inputs[1 + n_seqs:1 + n_seqs + n_states]
    non_seqs = inputs[1 + n_seqs + n_states:]
    lengths = lay.mit_sot_lengths + (1,) * lay.n_sit_sot
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

    # backward sequences, all reversed: step-output cotangents, then the forward body's inputs
    b_seqs = [_reversed_window(grads_out[q], lengths[q], n) for q in f_states]
    b_seqs += [grads_out[n_states + i][::-1] for i in f_nits]
    b_seqs += [_reversed_window(x, o, n) for x, offs in zip(seqs, lay.seq_offsets)
               for o in offs]
    b_seqs += [_reversed_window(outputs[q], lengths[q] + tap, n)
               for q in range(n_states) for tap in state_taps[q]]
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
        return [*new_windows, *[s + g for s, g in zip(sums, grads)], *dxs]

    buffers, _ = scan_buffers(step, sequences=b_seqs,
                              outputs_info=[*carries, *[None] * n_dx],
                              non_sequences=list(non_seqs), n_steps=n)
    finals = [b[-1] for b in buffers[:len(carries)]]
    dxs = buffers[len(carries):]

    result: list = [None] * len(inputs)
    k = 0
    for j in f_seqs:
        dx = zeros_like(seqs[j])
        for o in lay.seq_offsets[j]:
            dx = inc_subtensor(dx[o:o + n], dxs[k][::-1])
            k += 1
        result[1 + j] = dx
    k = 0
    for q in f_states:
        window, k = finals[k:k + lengths[q]], k + lengths[q]
        g = grads_out[q]
        if q < n_mit:  # entry r of the initial value is owed window[k - 1 - r]
            rows = [g[r] + window[lengths[q] - 1 - r] for r in range(lengths[q])]
            result[1 + n_seqs + q] = stack(rows)
        else:
            result[1 + n_seqs + q] = g[0] + window[0]
    for w, total in zip(f_non_seqs, finals[k:]):
        result[1 + n_seqs + n_states + w] = total
    return result
