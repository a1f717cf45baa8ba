"""`grad`: the gradient of a scalar cost, by reverse-mode accumulation over each op's `L_op`
(`verglas.ops.autodiff`)."""

from __future__ import annotations

import numpy as np

from verglas.graph.basic import Variable
from verglas.graph.traversal import ancestors, toposort
from verglas.ops.autodiff import backprop
from verglas.ops.basic import as_tensor
from verglas.ops.math import ones_like, zeros_like
from verglas.ops.scan import without_unused_outputs

__all__ = ["grad", "DisconnectedInputError"]


class DisconnectedInputError(ValueError):
    """The cost does not depend on a variable the gradient was asked for."""


def grad(cost, wrt, disconnected: str = "zero"):
    """Gradient of the scalar `cost` with respect to `wrt` (a variable or a list of them).

    Disconnected (and integer) variables get a zero gradient, or DisconnectedInputError when
    `disconnected="raise"`. Returns the same structure as `wrt`.
    """
    if disconnected not in ("zero", "raise"):
        raise ValueError(f"grad: disconnected must be 'zero' or 'raise', not {disconnected!r}")
    cost = as_tensor(cost)
    if cost.ndim != 0:
        raise TypeError(f"grad: the cost must be a scalar (0-d), got ndim {cost.ndim}")
    if np.dtype(cost.dtype).kind not in "fc":
        raise TypeError(f"grad: the cost must be a float, got dtype {cost.dtype}")
    single = isinstance(wrt, Variable)
    wrt_list = [wrt] if single else list(wrt)
    for k, w in enumerate(wrt_list):
        if not isinstance(w, Variable):
            raise TypeError(f"grad: wrt[{k}] is {type(w).__name__}, not a variable")

    grads = backprop({cost: ones_like(cost)}, wrt_list)
    # connected = the cost depends on it, even if only through non-differentiable ops
    # (comparisons, floor_divide): those get a zero gradient, never DisconnectedInputError
    connected = set(ancestors([cost])) if disconnected == "raise" else set()
    results = []
    for k, w in enumerate(wrt_list):
        g = grads.get(w)
        if g is None or np.dtype(w.dtype).kind not in "fc":
            if disconnected == "raise" and g is None and w not in connected:
                raise DisconnectedInputError(
                    f"grad: the cost does not depend on wrt[{k}] ({w!r})")
            dtype = w.dtype if np.dtype(w.dtype).kind in "fc" else cost.dtype
            g = zeros_like(w, dtype=dtype)
        results.append(g)
    # the pullback is clean when built: backward loops compute only what these need
    results = without_unused_outputs(results, keep=toposort([cost]))
    return results[0] if single else results
