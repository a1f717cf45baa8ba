"""Testing helpers: `verify_grad` checks symbolic gradients against finite differences."""

from __future__ import annotations

import numpy as np

from verglas.function import compile
from verglas.grad import grad
from verglas.ops.basic import constant
from verglas.ops.reduce import sum as vsum
from verglas.ops.variable import tensor

__all__ = ["verify_grad", "GradientError"]


class GradientError(AssertionError):
    """Symbolic and numerical gradients disagree."""


def verify_grad(fn, point, rng=None, eps: float = 1e-6, rtol: float = 1e-5,
                atol: float = 1e-7, mode: str = "reference") -> None:
    """Check `grad` of `fn` at `point` (a list of float arrays) against central differences.

    `fn` maps symbolic variables to an output; a non-scalar output is projected on a fixed
    random direction. Computed in float64; raises GradientError when they disagree.
    """
    rng = np.random.default_rng(0) if rng is None else rng
    point = [np.array(p, dtype="float64") for p in point]
    inputs = [tensor(f"p{i}", shape=p.shape, dtype="float64") for i, p in enumerate(point)]
    out = fn(*inputs)
    if out.ndim:
        shape = out.type.shape
        if None in shape:  # the run-time shape at `point`
            shape = np.shape(compile(inputs, out, mode=mode)(*point))
        out = vsum(out * constant(rng.normal(size=shape)))
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
