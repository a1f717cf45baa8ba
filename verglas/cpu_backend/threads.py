"""Whether generated programs may run loops over rows on several threads (numba's thread
pool, through parallel_for.parallel_range).

A Function is called from many Python threads at once, so only a threading layer that is safe
under concurrent calls will do: TBB (numba's first choice when it loads), or OpenMP when the
user asked for it. numba's last resort, 'workqueue', aborts the process on concurrent use:
without TBB, programs stay serial. TBB comes from the `tbb` wheel, which installs libtbb into
the environment's lib/ where the dynamic loader does not look inside a virtualenv: it is
loaded from there first, so numba's own lookup by soname finds it.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys

import numba

from verglas.config import config

__all__ = ["parallel_rows"]

_TBB = {"linux": "libtbb.so.12", "darwin": "libtbb.12.dylib", "win32": "tbb12.dll"}


def _load_tbb() -> bool:
    name = _TBB.get(sys.platform)
    if name is None:
        return False
    for path in (os.path.join(sys.prefix, "lib", name), name):
        try:
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            break
        except OSError:
            continue
    else:
        return False
    try:  # numba's TBB layer, imported only once libtbb is loaded (and optional)
        from numba.np.ufunc.parallel import _check_tbb_version_compatible

        _check_tbb_version_compatible()
        from numba.np.ufunc import tbbpool  # noqa: F401
    except ImportError:
        return False
    return True


def parallel_rows() -> bool:
    """True when row loops may run on numba's thread pool: `config.threads` (VERGLAS_THREADS)
    says they may, and a layer safe under concurrent calls is there."""
    return config.threads and _safe_layer()


@functools.cache
def _safe_layer() -> bool:
    """numba's threading layer is safe under concurrent calls (TBB is loaded on first ask).
    numba picks its layer once per process (NUMBA_THREADING_LAYER), so the answer is kept."""
    layer = numba.config.THREADING_LAYER
    if layer == "omp":
        return True
    if layer in ("tbb", "safe"):
        return _load_tbb()
    if layer in ("default", "threadsafe"):
        priority = getattr(numba.config, "THREADING_LAYER_PRIORITY", ["tbb"])
        return bool(priority) and priority[0] == "tbb" and _load_tbb()
    return False
