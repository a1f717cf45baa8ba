"""Compare the CUDA backend with the reference executor (used by tests/cuda/sim and tests/gpu).

Imports no numba: the caller's process decides between the simulator and a GPU.
"""

from __future__ import annotations

import numpy as np

import verglas as vg
from tests.helpers import check_call

__all__ = ["compare_cuda", "symbolic_inputs"]


def symbolic_inputs(arrays, static_shapes=None):
    if static_shapes is None:
        static_shapes = [None] * len(arrays)
    return [vg.tensor(f"x{k}", shape=s if s is not None else (None,) * a.ndim, dtype=a.dtype)
            for k, (a, s) in enumerate(zip(arrays, static_shapes))]


def compare_cuda(build, arrays, static_shapes=None, rtol=None, atol=None, calls: int = 1):
    """Compile `build(*inputs)` for device="cuda" and mode="reference"; run both on `arrays`
    and compare every output (dtype, shape, values); the inputs must be unchanged and the
    outputs fresh arrays aliasing neither the inputs nor each other. Returns the Function."""
    inputs = symbolic_inputs(arrays, static_shapes)
    outputs = build(*inputs)
    f = vg.compile(inputs, outputs, device="cuda")
    ref = vg.compile(inputs, outputs, mode="reference")
    copies = [np.array(a, copy=True) for a in arrays]
    expected = ref(*copies)
    multi = isinstance(outputs, (list, tuple))
    for _ in range(calls):
        got = f(*arrays)
        # (device results come to the host as fresh copies: their flags say nothing)
        check_call(arrays, copies, list(got) if multi else [got],
                   list(expected) if multi else [expected], rtol, atol, writable=False)
    return f
