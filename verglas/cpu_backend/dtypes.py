"""Dtypes in the CPU backend's generated code: numba has no half-precision type, so a float16
buffer is a float32 array holding half-precision values (each is exactly a float32). Code
computes in float32 (or float64) and rounds to half precision where it produces a float16
value, as numpy's float16 loops do; the runner hands float16 inputs over as float32 and
returns float16 arrays.

`np_dtype`, `literal` and `cast_expr` are the shared ones (verglas.source) with that storage
applied; everything the CPU backend emits goes through them.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from verglas.source import cast_expr as _cast_expr
from verglas.source import literal as _literal
from verglas.source import np_dtype as _np_dtype

__all__ = ["storage_dtype", "np_dtype", "literal", "cast_expr", "to_storage", "from_storage",
           "half_round", "STORED_AS"]

STORED_AS = {"float16": "float32"}


def storage_dtype(dtype: str) -> str:
    """The dtype a buffer of `dtype` has in generated code."""
    return STORED_AS.get(dtype, dtype)


def np_dtype(dtype: str) -> str:
    """The numpy dtype expression of buffers (and accumulators) of `dtype`."""
    return _np_dtype(storage_dtype(dtype))


def literal(value, dtype: str) -> str:
    """A typed scalar literal (a float16 value as the float32 that holds it)."""
    if dtype in STORED_AS:
        value = np.asarray(value).astype(dtype).astype(STORED_AS[dtype])
    return _literal(value, storage_dtype(dtype))


def cast_expr(expr: str, dtype: str, src=None) -> str:
    """`expr` converted to `dtype` (to float16: rounded to half precision; the rounding helper
    is registered with ProgramSource `src`, or named by its reference otherwise)."""
    if dtype == "float16":
        name = src.add_global("half_round", half_round) if src is not None else "half_round"
        return f"{name}({expr})"
    return _cast_expr(expr, dtype)


def to_storage(array: np.ndarray) -> np.ndarray:
    """An array as generated code takes it (float16 -> float32, exact)."""
    dtype = STORED_AS.get(array.dtype.name)
    return array if dtype is None else array.astype(dtype)


def from_storage(array, dtype: str):
    """A result of generated code as the program's `dtype` (float32 -> float16, exact)."""
    if dtype in STORED_AS and isinstance(array, np.ndarray) and array.dtype.name != dtype:
        return array.astype(dtype)
    return array


_HALF_MAX_ROUND = 65520.0  # halfway between 65504 (the largest half) and 2**16: rounds to inf
_HALF_MIN_NORMAL = 2.0 ** -14
_HALF_SUBNORMAL_STEP = 2.0 ** -24


@numba.njit(cache=False, error_model="numpy", no_cpython_wrapper=True, no_cfunc_wrapper=True)
def half_round(x):
    """`x` rounded to the nearest half-precision value (ties to even), as a float32: numpy's
    float16 conversion, written with float64 operations compiled without fast-math flags."""
    v = np.float64(x)
    a = abs(v)
    if a != a:
        return np.float32(v)
    if a >= _HALF_MAX_ROUND:
        return np.float32(math.copysign(math.inf, v))
    if a < _HALF_MIN_NORMAL:
        step = _HALF_SUBNORMAL_STEP
    else:
        _, e = math.frexp(a)  # a = m * 2**e with 0.5 <= m < 1: 11 significant bits
        step = math.ldexp(1.0, e - 11)
    q = a / step  # exact: a power-of-two scaling
    r = math.floor(q)
    d = q - r
    if d > 0.5 or (d == 0.5 and r % 2 == 1):
        r += 1.0
    return np.float32(math.copysign(r * step, v))
