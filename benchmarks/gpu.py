"""GPU helpers: the device-to-device copy that sets the bandwidth ceiling."""

from __future__ import annotations

import os

from benchmarks.timing import Timing, measure


def simulated() -> bool:
    """Whether numba's CUDA simulator stands in for a GPU (NUMBA_ENABLE_CUDASIM=1): the suite
    then runs as a smoke test, verglas against numpy on quick sizes, with no timing to read."""
    return os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


def gpu_missing() -> str | None:
    """Why the CUDA path cannot run here (no cupy, no driver, no device), or None."""
    try:
        import cupy
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "no CUDA device"
    except Exception as exc:  # noqa: BLE001 -- ImportError, or CUDARuntimeError without a driver
        return f"cupy unusable ({type(exc).__name__}: {exc})"
    return None


def copy_timing(nbytes: int, repeat: int) -> Timing:
    """Per-copy time of `b[...] = a` moving `nbytes` in all (half read, half written)."""
    import cupy
    n = max(1, nbytes // 2 // 4)
    a = cupy.ones(n, dtype=cupy.float32)
    b = cupy.empty_like(a)

    def copy():
        b[...] = a

    def sync(_):
        cupy.cuda.Device().synchronize()

    return measure(copy, sync=sync, repeat=repeat, min_sample=0.01)
