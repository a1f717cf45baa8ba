"""Reverse-mode automatic differentiation over each op's `L_op`, and `verify_grad`."""

from __future__ import annotations

import numpy as np

from verglas.graph.basic import Variable
from verglas.graph.traversal import ancestors, toposort

__all__ = ["grad", "vjp", "verify_grad", "DisconnectedInputError", "GradientError"]


class DisconnectedInputError(ValueError):
    """The cost does not depend on a variable the gradient was asked for."""


class GradientError(AssertionError):
    """Symbolic and numerical gradients disagree."""


def grad(cost, wrt, disconnected: str = "zero"):
    """Gradient of the scalar `cost` with respect to `wrt` (a variable or a list of them).

    Disconnected (and integer) variables get a zero gradient, or DisconnectedInputError when
    `disconnected="raise"`. Returns the same structure as `wrt`.
    """
    from verglas.ops import math as m
    from verglas.ops.variable import as_tensor

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

    grads = _backprop({cost: m.ones_like(cost)}, wrt_list)
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
            g = m.zeros_like(w, dtype=dtype)
        results.append(g)
    return results[0] if single else results


def vjp(outputs, output_grads, wrt) -> list:
    """Vector-Jacobian product: gradients w.r.t. `wrt` of `outputs` seeded with `output_grads`.

    An entry of `output_grads` may be None (no gradient flows from that output); a `wrt`
    variable the seeded outputs do not depend on gets None.
    """
    from verglas.ops.variable import as_tensor

    seeds: dict = {}
    for out, g in zip(outputs, output_grads, strict=True):
        if g is None:
            continue
        g = as_tensor(g)
        seeds[out] = g if out not in seeds else seeds[out] + g
    grads = _backprop(seeds, list(wrt))
    return [grads.get(w) for w in wrt]


def _backprop(seeds: dict, wrt_list: list) -> dict:
    """Accumulate gradients from `seeds` (variable -> gradient) back to every variable on a
    path from `wrt_list` to the seeded variables."""
    from verglas.ops import math as m
    from verglas.ops.variable import as_tensor

    nodes = toposort(list(seeds))
    # only nodes that depend on some wrt variable carry gradient towards it
    reaches = set(wrt_list)
    on_path = []
    for node in nodes:
        if any(i in reaches for i in node.inputs):
            on_path.append(node)
            reaches.update(node.outputs)

    grads: dict = dict(seeds)
    for node in reversed(on_path):
        out_grads = [grads.get(o) for o in node.outputs]
        if all(g is None for g in out_grads):
            continue
        out_grads = [m.zeros_like(o) if g is None else g for o, g in zip(node.outputs, out_grads)]
        input_grads = node.op.L_op(list(node.inputs), list(node.outputs), out_grads)
        if len(input_grads) != len(node.inputs):
            raise ValueError(f"{node.op}.L_op returned {len(input_grads)} gradients for "
                             f"{len(node.inputs)} inputs")
        for inp, g in zip(node.inputs, input_grads):
            if g is None or inp not in reaches:
                continue
            g = as_tensor(g)
            if g.ndim != inp.ndim:
                raise ValueError(f"{node.op}.L_op: gradient of ndim {g.ndim} for an input of "
                                 f"ndim {inp.ndim}")
            if g.dtype != inp.dtype and np.dtype(inp.dtype).kind in "fc":
                g = m.cast(g, inp.dtype)
            prev = grads.get(inp)
            grads[inp] = g if prev is None else prev + g
    return grads


def verify_grad(fn, point, rng=None, eps: float = 1e-6, rtol: float = 1e-5,
                atol: float = 1e-7, mode: str = "reference") -> None:
    """Check `grad` of `fn` at `point` (a list of float arrays) against central differences.

    `fn` maps symbolic variables to an output; a non-scalar output is projected on a fixed
    random direction. Computed in float64; raises GradientError when they disagree.
    """
    from verglas.function import compile
    from verglas.ops import reduce as r
    from verglas.ops.variable import constant, tensor

    rng = np.random.default_rng(0) if rng is None else rng
    point = [np.array(p, dtype="float64") for p in point]
    inputs = [tensor(f"p{i}", shape=p.shape, dtype="float64") for i, p in enumerate(point)]
    out = fn(*inputs)
    if out.ndim:
        shape = out.type.shape
        if None in shape:  # the run-time shape at `point`
            shape = np.shape(compile(inputs, out, mode=mode)(*point))
        out = r.sum(out * constant(rng.normal(size=shape)))
    cost_fn = compile(inputs, out, mode=mode)
    grad_fn = compile(inputs, grad(out, inputs), mode=mode)
    symbolic = grad_fn(*point)
    for k, p in enumerate(point):
        numeric = np.zeros_like(p)
        flat = p.reshape(-1)
        for j in range(flat.size):
            saved = flat[j]
            flat[j] = saved + eps
            plus = float(cost_fn(*point))
            flat[j] = saved - eps
            minus = float(cost_fn(*point))
            flat[j] = saved
            numeric.reshape(-1)[j] = (plus - minus) / (2 * eps)
        got = np.asarray(symbolic[k])
        if not np.allclose(got, numeric, rtol=rtol, atol=atol + rtol * np.abs(numeric).max(
                initial=0.0)):
            raise GradientError(
                f"verify_grad: input {k}: symbolic gradient\n{got}\n!= numerical\n{numeric}\n"
                f"max abs diff {np.max(np.abs(got - numeric))}")
