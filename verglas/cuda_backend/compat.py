"""numba.cuda, imported with what the pinned numba-cuda needs from the installed numpy."""

import functools
import warnings

import numpy as np


@functools.cache
def numba_cuda():
    """The `numba.cuda` module. numba-cuda 0.30.4 registers an overload of `np.row_stack` when
    it first lowers a kernel; numpy 2.5 removed that alias of `np.vstack` (seen on the first
    real GPU machine, numpy 2.5.2: every kernel compile failed), so the alias is restored."""
    with warnings.catch_warnings():  # numpy 2.0-2.4: a deprecated alias, still there
        warnings.simplefilter("ignore", DeprecationWarning)
        missing = not hasattr(np, "row_stack")
    if missing:
        np.row_stack = np.vstack
    from numba import cuda

    return cuda
