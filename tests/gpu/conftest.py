"""Tests that need a real NVIDIA GPU with cupy; skipped everywhere else (and under the
simulator)."""

import os

import pytest


def _gpu_reason():
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return "the CUDA simulator is active"
    try:
        from numba import cuda

        if not cuda.is_available():
            return "no CUDA device"
        import cupy  # noqa: F401
    except Exception as exc:  # cupy raises AttributeError without CUDA
        return f"numba-cuda / cupy unavailable: {exc}"
    return None


def pytest_collection_modifyitems(config, items):
    reason = _gpu_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if "tests/gpu" in str(item.fspath).replace("\\", "/"):
            item.add_marker(skip)
