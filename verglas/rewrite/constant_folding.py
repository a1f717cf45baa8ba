"""Constant folding: a node whose inputs are all constants is computed once, at compile time,
with its reference `perform`, and replaced by the resulting constants.

Bounded so a graph never grows big constants: at most MAX_FOLD_SIZE elements per node, and a
node that broadcasts (an output bigger than its largest input: Alloc, zeros_like, arange...)
folds only when its outputs stay tiny (MAX_EXPAND_SIZE): a fill is cheap at run time and a
big literal costs memory, hashing and pickling. Ops with a destroy_map never fold, nor ops
whose perform raises (the node stays; the error shows at run time, where it belongs).
"""

from __future__ import annotations

import numpy as np

from verglas.graph import Constant, TensorType
from verglas.ops.basic import constant
from verglas.rewrite.engine import node_rewriter
from verglas.rewrite.registry import register

__all__ = ["MAX_FOLD_SIZE", "MAX_EXPAND_SIZE", "constant_fold", "fold"]

MAX_FOLD_SIZE = 100_000  # elements of all outputs of one folded node
MAX_EXPAND_SIZE = 64  # outputs larger than every input fold only up to this many elements


def _static_size(node) -> int | None:
    total = 0
    for out in node.outputs:
        shape = out.type.shape
        if None in shape:
            return None
        total += int(np.prod(shape, dtype=np.int64))
    return total


def _size_ok(out_size: int, in_size: int) -> bool:
    return out_size <= MAX_FOLD_SIZE and (out_size <= in_size or out_size <= MAX_EXPAND_SIZE)


def fold(node) -> list | None:
    """The outputs of `node` (all inputs constant) as constants, or None when it should stay."""
    op = node.op
    if op.destroy_map:
        return None
    in_size = max((i.data.size for i in node.inputs), default=0)
    size = _static_size(node)
    if size is not None and not _size_ok(size, in_size):
        return None
    storage = [[None] for _ in node.outputs]
    try:
        with np.errstate(all="ignore"):
            op.perform(node, [i.data for i in node.inputs], storage)
    except Exception:  # noqa: BLE001 - the error is the program's: it shows at run time
        return None
    values = [np.asarray(s[0]) for s in storage]
    if not _size_ok(sum(v.size for v in values), in_size):
        return None
    out = []
    for var, value in zip(node.outputs, values):
        if not isinstance(var.type, TensorType):
            return None
        if value.dtype.name != var.dtype or value.ndim != var.ndim:
            return None  # a perform that breaks its own type: leave it to the run-time checks
        new = constant(value, var.dtype)
        if not var.type.is_super(new.type):
            return None
        out.append(new)
    return out


@register(phase="constant_folding", tags=("fast_run", "fast_compile"))
@node_rewriter(None)
def constant_fold(fgraph, node):
    """op(c1, c2, ...) -> the constant it computes (bounded in size, see module doc)."""
    for var in node.inputs:
        if not isinstance(var, Constant):
            return None
    if not node.inputs:
        return None
    return fold(node)


# Rewrites create constant-only nodes too: fold them where the algebra runs.
register(constant_fold, phase="canonicalize", name="constant_fold_canonicalize",
         tags=("fast_run", "fast_compile"))
register(constant_fold, phase="specialize", name="constant_fold_specialize",
         tags=("fast_run",))
