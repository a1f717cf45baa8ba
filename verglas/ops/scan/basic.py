"""`scan`: loops from a Python step function (PyTensor semantics, no updates dict)."""

from __future__ import annotations

from verglas.ops.scan.build import NIT_SOT, scan_buffers

__all__ = ["scan"]


def scan(fn, sequences=None, outputs_info=None, non_sequences=None, n_steps=None):
    """Loop `fn` over the leading axis of `sequences`, carrying `outputs_info` states.

    `fn` receives, in order: the taps of each sequence, the past values of each output that
    has an initial value (its taps in order), then `non_sequences`; it returns one output or a
    list (one per `outputs_info` entry). `outputs_info` entries are a variable (sit-sot: `fn`
    gets the previous value), None (nit-sot: just collected) or `dict(initial=v, taps=[-2,
    -1])` (mit-sot: `v` holds the `-min(taps)` values before the first step). Returns the
    stacked outputs (leading axis = steps, initial values excluded): one or a list.

    Examples
    --------
    >>> import verglas as vg
    >>> x = vg.tensor("x", shape=(None,))
    >>> csum = vg.scan(lambda x_t, acc: acc + x_t, sequences=x, outputs_info=vg.as_tensor(0.0))
    >>> vg.compile([x], csum, mode="reference")([1.0, 2.0, 3.0])
    array([1., 3., 6.])
    """
    buffers, infos = scan_buffers(fn, sequences, outputs_info, non_sequences, n_steps)
    results = []
    for out, (kind, _, taps) in zip(buffers, infos):
        # the Scan's state outputs start with the initial values: drop them
        results.append(out if kind == NIT_SOT else out[-min(taps):])
    return results[0] if len(results) == 1 else results
