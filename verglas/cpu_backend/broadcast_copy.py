"""An input brought to its broadcast shape by a copy: the rare case where an elementwise
step's broadcasting is decided at run time (the general variant), so that its loops index
directly and vectorize."""

from __future__ import annotations

import numba

from verglas.cpu_backend.intrinsics import c_contiguous, empty_expr

__all__ = ["broadcast_into", "broadcast_offset", "emit_broadcast_copy"]


@numba.njit(cache=False, inline="always")
def broadcast_offset(flat, shape, small):
    """The offset, in a C-contiguous array of lengths `small` (those of `shape`, or 1 where
    broadcast), of the element that flat index `flat` of `shape` reads (broadcasting) or adds
    into (summing back to `small`)."""
    off = 0
    stride = 1
    for a in range(len(shape) - 1, -1, -1):
        i = flat % shape[a]
        flat //= shape[a]
        if small[a] != 1:
            off += i * stride
        stride *= small[a]
    return off


@numba.njit(cache=False, error_model="numpy")
def broadcast_into(x, out):
    """out[...] = x broadcast (shapes already checked)."""
    xc = c_contiguous(x)
    xv = xc.reshape(xc.size)
    n = out.size
    ov = out.reshape(n)
    for flat in range(n):
        ov[flat] = xv[broadcast_offset(flat, out.shape, x.shape)]


def emit_broadcast_copy(ctx, name, v, target, dtype, contiguous) -> None:
    """`v` = `name` broadcast to the shape tuple `target` (already checked compatible): the
    array itself when it has that shape and is C-contiguous, else a copy by a jitted helper.

    (np.broadcast_to would redo the checks, and its error path makes numba compile its whole
    string-formatting machinery: seconds of compile time for a message we never need. Inline
    copy loops would cost compile time in every program for a case that rarely runs.)
    """
    fn = ctx.helper("broadcast_into", broadcast_into)
    empty = empty_expr(ctx.src, target, dtype)
    if contiguous:
        same = ctx.fresh("same")
        ctx.line(f"{same} = {name}.shape == {target}")
        ctx.line(f"{v} = {name} if {same} else {empty}")
        ctx.line(f"if not {same}:")
        with ctx.indent():
            ctx.line(f"{fn}({name}, {v})")
    else:
        ctx.line(f"{v} = {empty}")
        ctx.line(f"{fn}({name}, {v})")
