"""Comparing a framework's outputs with the numpy reference."""

from __future__ import annotations

import numpy as np

RTOL = {"float16": 1e-2, "float32": 1e-4, "float64": 1e-7}


def compare(got: list[np.ndarray], want: list[np.ndarray]) -> str | None:
    """None when `got` matches `want` (dtype, shape, values), else what differs.

    Values match within rtol (1e-4 for float32, 1e-7 for float64) and an absolute tolerance
    of rtol times the largest reference magnitude, so near-zero entries of sums and gradients
    are judged on the output's scale.
    """
    if len(got) != len(want):
        return f"{len(got)} outputs, expected {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(g), np.asarray(w)
        if g.dtype != w.dtype:
            return f"output {i}: dtype {g.dtype}, expected {w.dtype}"
        if g.shape != w.shape:
            return f"output {i}: shape {g.shape}, expected {w.shape}"
        rtol = RTOL.get(str(w.dtype), 0.0)
        scale = float(np.max(np.abs(w))) if w.size else 0.0
        if not np.allclose(g, w, rtol=rtol, atol=rtol * scale, equal_nan=True):
            err = np.max(np.abs(g.astype(np.float64) - w))
            return f"output {i}: max abs error {err:.3g} (rtol {rtol:g}, scale {scale:.3g})"
    return None
