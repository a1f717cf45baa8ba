"""softmax, log_softmax and logsumexp as compositions of elementwise ops and reductions
(numerically stable: the maximum is subtracted first), so fusion can work on them."""

from __future__ import annotations

from verglas.graph.basic import Variable
from verglas.ops import math as m
from verglas.ops.basic import as_tensor, normalize_axis, squeeze
from verglas.ops.reduce import Max
from verglas.ops.reduce import sum as vsum

__all__ = ["softmax", "log_softmax", "logsumexp"]


def _float(x):
    x = as_tensor(x)
    return x if x.dtype.startswith(("float", "complex")) else m.cast(x, "float64")


def _shift(x, axes):
    """The per-slice maximum, replaced by 0 where it is not finite (as scipy's logsumexp):
    all -inf stays -inf rather than becoming nan; an empty slice gives 0 too (so its
    logsumexp is log(0) = -inf). Without a gradient: the results do not depend on the
    shift, so its gradient terms cancel (JAX's softmax stops it likewise), and the gradient
    has no pass over the maximum's positions."""
    top = Max(axes, keepdims=True, empty_ok=True)(x)
    return m.stop_gradient(m.where(m.isinf(top), 0, top))


def logsumexp(x, axis=None, keepdims: bool = False) -> Variable:
    """log(sum(exp(x))) over `axis`, without overflow; its gradient is softmax."""
    x = _float(x)
    axes = normalize_axis(axis, x.ndim, "logsumexp")
    shift = _shift(x, axes)
    total = vsum(m.exp(x - shift), axes, keepdims=True)
    out = m.log(total) + shift
    if not keepdims:
        out = squeeze(out, axes)
    return out


def softmax(x, axis=-1) -> Variable:
    """exp(x) / sum(exp(x)) along `axis`, computed after subtracting the maximum."""
    x = _float(x)
    axes = normalize_axis(axis, x.ndim, "softmax")
    e = m.exp(x - _shift(x, axes))
    return e / vsum(e, axes, keepdims=True)


def log_softmax(x, axis=-1) -> Variable:
    """x - logsumexp(x) along `axis`, computed after subtracting the maximum."""
    x = _float(x)
    axes = normalize_axis(axis, x.ndim, "log_softmax")
    shifted = x - _shift(x, axes)
    return shifted - m.log(vsum(m.exp(shifted), axes, keepdims=True))
