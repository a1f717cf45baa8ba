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

__all__ = ["numpy_cblas_gemm", "ROW_MAJOR", "COL_MAJOR", "NO_TRANS", "TRANS"]

COL_MAJOR, ROW_MAJOR = 102, 101  # CBLAS enums
NO_TRANS, TRANS = 111, 112

_SYMBOLS = {"s": "scipy_cblas_sgemm64_", "d": "scipy_cblas_dgemm64_"}


def numpy_cblas_gemm() -> dict[str, str]:
    """{'s': name, 'd': name}: the LLVM symbols of numpy's CBLAS sgemm/dgemm (ILP64:
    `void gemm(int order, int transa, int transb, int64 m, n, k, T alpha, T *a, int64 lda,
    T *b, int64 ldb, T beta, T *c, int64 ldc)`), registered on first call; {} when numpy's
    BLAS is not such a library (`config.numpy_blas` False, VERGLAS_NUMPY_BLAS=0, also says no)."""
    return _registered() if config.numpy_blas else {}


@functools.cache
def _registered() -> dict[str, str]:
    """Find numpy's CBLAS gemm and register its symbols with LLVM (once per process)."""
    libs = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs")
    found = {}
    for path in sorted(glob.glob(os.path.join(libs, "libscipy_openblas64_*"))):
        try:
            lib = ctypes.CDLL(path)
            found = {kind: ctypes.cast(getattr(lib, symbol), ctypes.c_void_p).value
                     for kind, symbol in _SYMBOLS.items()}
            break
        except (OSError, AttributeError):
            continue
    names = {}
    for kind, address in found.items():
        names[kind] = f"verglas_numpy_cblas_{kind}gemm"
        binding.add_symbol(names[kind], address)
    return names
