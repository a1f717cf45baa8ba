"""CUDA backend: kernels generated as numba.cuda Python source, run through cupy on a GPU or
through numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1) without one.

Importing this package imports neither numba.cuda nor cupy: runtime.build_runner does, when a
Function with device="cuda" is built.
"""
