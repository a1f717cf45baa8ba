"""The BLAS behind generated matrix products: numpy's own, where it can be found.

numba's gemm goes through scipy's OpenBLAS, a second library with a thread pool of its own
beside numpy's. On a 2-core machine the two pools fight: a product right after a numpy product
took 3.9 ms instead of 1.6 (mlp_fwd, measured here), and the same the other way round. numpy's
wheels ship OpenBLAS with 64-bit-integer CBLAS entry points (`scipy_cblas_sgemm64_`, ...);
loading that very file again gives numpy's library (and pool), whose gemm is registered with
LLVM under our own names. Without it (other numpy builds), programs call numba's gemm.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import os

import numpy as np
from llvmlite import binding

from verglas.config import config

__all__ = ["numpy_cblas_gemm", "numpy_cblas_gemv", "numpy_cblas_syrk", "ROW_MAJOR",
           "COL_MAJOR", "NO_TRANS", "TRANS", "UPPER"]

COL_MAJOR, ROW_MAJOR = 102, 101  # CBLAS enums
NO_TRANS, TRANS = 111, 112
UPPER = 121

_ROUTINES = ("sgemm", "dgemm", "sgemv", "dgemv", "ssyrk", "dsyrk")


def numpy_cblas_gemm() -> dict[str, str]:
    """{'s': name, 'd': name}: the LLVM symbols of numpy's CBLAS sgemm/dgemm (ILP64:
    `void gemm(int order, int transa, int transb, int64 m, n, k, T alpha, T *a, int64 lda,
    T *b, int64 ldb, T beta, T *c, int64 ldc)`), registered on first call; {} when numpy's
    BLAS is not such a library (`config.numpy_blas` False, VERGLAS_NUMPY_BLAS=0, also says no)."""
    return _of("gemm")


def numpy_cblas_gemv() -> dict[str, str]:
    """{'s': name, 'd': name}: numpy's CBLAS sgemv/dgemv, as numpy_cblas_gemm (`void gemv(int
    order, int trans, int64 m, n, T alpha, T *a, int64 lda, T *x, int64 incx, T beta, T *y,
    int64 incy)`): a matrix times a vector, where gemm with one column packs the matrix first
    (4096x1024 float32: 0.58 ms against numpy's 0.12)."""
    return _of("gemv")


def numpy_cblas_syrk() -> dict[str, str]:
    """{'s': name, 'd': name}: numpy's CBLAS ssyrk/dsyrk, as numpy_cblas_gemm (`void syrk(int
    order, int uplo, int trans, int64 n, k, T alpha, T *a, int64 lda, T beta, T *c, int64
    ldc)`): a matrix times its own transpose, one triangle's products (numpy's matmul does the
    same: x.T @ x of 4096x1024 float32 took 49 ms by gemm, 32 by syrk)."""
    return _of("syrk")


def _of(routine: str) -> dict[str, str]:
    names = _registered() if config.numpy_blas else {}
    return {kind: names[kind + routine] for kind in "sd" if kind + routine in names}


@functools.cache
def _registered() -> dict[str, str]:
    """Find numpy's CBLAS routines and register their symbols with LLVM (once per process):
    {'sgemm': LLVM name, ...}."""
    libs = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs")
    found = {}
    for path in sorted(glob.glob(os.path.join(libs, "libscipy_openblas64_*"))):
        try:
            lib = ctypes.CDLL(path)
            found = {routine: ctypes.cast(getattr(lib, f"scipy_cblas_{routine}64_"),
                                          ctypes.c_void_p).value for routine in _ROUTINES}
            break
        except (OSError, AttributeError):
            continue
    names = {}
    for routine, address in found.items():
        names[routine] = f"verglas_numpy_cblas_{routine}"
        binding.add_symbol(names[routine], address)
    return names
