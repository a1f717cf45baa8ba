"""Liveness: the steps between which each buffer's storage must survive."""

from __future__ import annotations

__all__ = ["liveness"]


def liveness(n_buffers: int, steps, outputs, base_of, spans=()) -> list[tuple[int, int]]:
    """(first step, last step) per buffer; a view keeps its base alive, outputs live to the end.

    `base_of[b]` is the buffer whose storage `b` uses (itself when it owns its storage).
    `spans`: (buffers, last step) of steps that run interleaved (a row group, row by row; a
    reduction computing its producer): what any of them reads or writes lives through the
    last (no storage is handed on inside them).
    """
    end = len(steps)
    first = [-1] * n_buffers
    last = [-1] * n_buffers
    for step in steps:
        for b in step.outputs:
            first[b] = step.index
            last[b] = max(last[b], step.index)
        for b in step.inputs:
            last[b] = max(last[b], step.index)
    for buffers, span_last in spans:
        for b in buffers:
            last[b] = max(last[b], span_last)
    for b in outputs:
        last[b] = end
    # storage lives as long as anything that uses it
    for b in reversed(range(n_buffers)):
        root = base_of[b]
        if root != b:
            last[root] = max(last[root], last[b])
    return list(zip(first, last))
