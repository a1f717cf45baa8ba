"""Shared test helpers: compile a symbolic program, run it and compare it with numpy.

Stable API (other test modules rely on it):

- `compare_to_numpy(fn_symbolic, np_fn, arrays, ...)`: build one symbolic input per numpy array
  in `arrays` (non-arrays pass through to both functions as Python constants), compile
  `fn_symbolic(*inputs)` and compare its result with `np_fn(*arrays)`: same dtype exactly, same
  shape, values equal within a dtype-dependent tolerance (NaNs in the same places). It also
  asserts that the inputs were not modified and that the outputs are fresh, writable arrays.
- `assert_like_numpy(got, expected, rtol=None, atol=None, check_dtype=True)`.
- `check_call(arrays, copies, got, expected, ...)`: what every comparison of a call checks (the
  inputs unchanged, each output like numpy's, fresh, aliasing no input and no other output);
  `compare_to_numpy` here, `compare_backend` (CPU) and `compare_cuda` call it.
- `random_array(rng, dtype, shape, ...)`, `with_layout(array, layout)` (same values, other
  strides: "C", "F", "strided", "reversed").
- hypothesis strategies: `shapes()`, `dtypes()`, `broadcastable_shapes()`, `symbolic_shape()`,
  `layouts()`, `seeds()`; and `SETTINGS`, the settings tests use (few examples, no deadline).
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import verglas as vg

__all__ = ["SETTINGS", "DTYPES", "FLOAT_DTYPES", "INT_DTYPES", "LAYOUTS", "compare_to_numpy",
           "compile_and_run", "assert_like_numpy", "check_call", "default_tolerance",
           "random_array", "with_layout", "shapes", "dtypes", "broadcastable_shapes",
           "symbolic_shape", "layouts", "seeds"]

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
DTYPES = ("float32", "float64", "int32", "int64", "bool")
FLOAT_DTYPES = ("float32", "float64")
INT_DTYPES = ("int32", "int64")
LAYOUTS = ("C", "F", "strided", "reversed")


# -- comparing ------------------------------------------------------------------------------------
def default_tolerance(dtype) -> tuple[float, float]:
    """(rtol, atol) used to compare results of `dtype` (exact for integers and bools)."""
    kind, size = np.dtype(dtype).kind, np.dtype(dtype).itemsize
    if kind not in "fc":
        return 0.0, 0.0
    if size <= 2:
        return 1e-3, 1e-3
    if size == 4 or (kind == "c" and size == 8):
        return 1e-5, 1e-6
    return 1e-12, 1e-14


def assert_like_numpy(got, expected, rtol=None, atol=None, check_dtype: bool = True,
                      label: str = "") -> None:
    """`got` is a numpy array equal to `expected`: dtype (exactly), shape, values, NaNs."""
    expected = np.asarray(expected)
    assert isinstance(got, np.ndarray), f"{label}result is {type(got).__name__}, not ndarray"
    if check_dtype:
        assert got.dtype == expected.dtype, \
            f"{label}dtype {got.dtype} != numpy's {expected.dtype}"
    assert got.shape == expected.shape, f"{label}shape {got.shape} != numpy's {expected.shape}"
    d_rtol, d_atol = default_tolerance(expected.dtype)
    rtol = d_rtol if rtol is None else rtol
    atol = d_atol if atol is None else atol
    if expected.dtype.kind in "fc":
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol, equal_nan=True,
                                   err_msg=label)
    else:
        np.testing.assert_array_equal(got, expected, err_msg=label)


def check_call(arrays, copies, got: list, expected: list, rtol=None, atol=None,
               check_dtype: bool = True, tolerance=default_tolerance, writable: bool = True):
    """After a call on `arrays` (`copies` taken before it): the inputs are unchanged, each
    output (device arrays are brought to the host) is like its expected one, within `rtol`,
    `atol` or `tolerance(dtype)`'s, is writable (`writable`) and aliases no input and no other
    output."""
    for a, c in zip(arrays, copies):
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, c, err_msg="an input was modified")
    assert len(got) == len(expected), f"{len(got)} outputs, numpy's {len(expected)}"
    host = [vg.asnumpy(g) for g in got]
    for k, (g, e) in enumerate(zip(host, expected)):
        r, a = tolerance(np.asarray(e).dtype)
        assert_like_numpy(g, e, r if rtol is None else rtol, a if atol is None else atol,
                          check_dtype, label=f"output {k}: ")
        if writable:
            assert g.flags.writeable, f"output {k} is read-only"
        for x in arrays:
            if isinstance(x, np.ndarray):
                assert not np.shares_memory(g, x), f"output {k} aliases an input"
        for j in range(k):
            assert not np.shares_memory(g, host[j]), f"outputs {j} and {k} alias"


def compile_and_run(fn_symbolic, arrays, static_shapes=None, mode: str = "reference",
                    device: str = "cpu"):
    """Compile `fn_symbolic` on inputs typed like the numpy arrays in `arrays` and run it.

    Non-array entries of `arrays` are passed to `fn_symbolic` as they are (constants).
    `static_shapes` gives, per array, the symbolic shape (ints and None); by default every
    dimension is None (known at run time). Returns (result, inputs) with the result as the
    Function returns it (an array or a list).
    """
    inputs, values = [], []
    sym_args = []
    positions = [k for k, a in enumerate(arrays) if isinstance(a, np.ndarray)]
    if static_shapes is None:
        static_shapes = [None] * len(positions)
    static_shapes = list(static_shapes)
    assert len(static_shapes) == len(positions), "one static shape per array argument"
    it = iter(static_shapes)
    for k, a in enumerate(arrays):
        if isinstance(a, np.ndarray):
            shape = next(it)
            if shape is None:
                shape = (None,) * a.ndim
            var = vg.tensor(f"x{k}", shape=shape, dtype=a.dtype)
            inputs.append(var)
            values.append(a)
            sym_args.append(var)
        else:
            sym_args.append(a)
    out = fn_symbolic(*sym_args)
    f = vg.compile(inputs, out, mode=mode, device=device)
    return f(*values), inputs


def compare_to_numpy(fn_symbolic, np_fn, arrays, static_shapes=None, rtol=None, atol=None,
                     check_dtype: bool = True, mode: str = "reference", device: str = "cpu"):
    """Compile and run `fn_symbolic`, compare with `np_fn` on the same `arrays`; return result.

    `np_fn` returning a list/tuple means `fn_symbolic` returns a list of outputs. Also asserts
    that the inputs are unchanged (values and flags) and that the outputs are fresh, writable
    arrays that share no memory with the inputs or with one another.
    """
    copies = [a.copy() if isinstance(a, np.ndarray) else a for a in arrays]
    flags = [a.flags.writeable if isinstance(a, np.ndarray) else None for a in arrays]
    with np.errstate(all="ignore"):
        expected = np_fn(*copies)
    got, _ = compile_and_run(fn_symbolic, arrays, static_shapes, mode=mode, device=device)
    for a, w in zip(arrays, flags):
        if isinstance(a, np.ndarray):
            assert a.flags.writeable == w, "an input's flags were modified"
    multi = isinstance(expected, (list, tuple))
    check_call(arrays, copies, list(got) if multi else [got],
               list(expected) if multi else [expected], rtol, atol, check_dtype)
    return got


# -- data ---------------------------------------------------------------------------------------
def random_array(rng: np.random.Generator, dtype, shape, low=-5, high=5,
                 special: bool = False) -> np.ndarray:
    """Random values of `dtype` in [low, high) (bools: random); `special` sprinkles NaN/±Inf
    and ±0.0 into float arrays."""
    dtype = np.dtype(dtype)
    shape = tuple(shape)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        return rng.integers(low, high, size=shape, endpoint=False).astype(dtype)
    out = rng.uniform(low, high, size=shape).astype(dtype)
    if special and out.size:
        mask = rng.random(shape) < 0.25
        picks = rng.choice(np.array([np.nan, np.inf, -np.inf, 0.0, -0.0], dtype=dtype),
                           size=shape)
        out = np.where(mask, picks, out).astype(dtype)
    return out


def with_layout(array: np.ndarray, layout: str) -> np.ndarray:
    """`array`'s values with another memory layout: "C" (contiguous copy), "F" (Fortran order,
    i.e. a transposed buffer), "strided" (every other element of a larger buffer) or "reversed"
    (negative strides)."""
    if array.ndim == 0 or layout == "C":
        return np.array(array, order="C")
    if layout == "F":
        return np.asfortranarray(array).copy()
    if layout == "strided":
        big = np.zeros(tuple(2 * s for s in array.shape), dtype=array.dtype)
        view = big[tuple(slice(None, None, 2) for _ in array.shape)]
        view[...] = array
        return view
    if layout == "reversed":
        rev = tuple(slice(None, None, -1) for _ in array.shape)
        return np.ascontiguousarray(array[rev])[rev]
    raise ValueError(f"unknown layout {layout!r}")


# -- hypothesis strategies ----------------------------------------------------------------------
def shapes(min_dims: int = 0, max_dims: int = 3, min_side: int = 0, max_side: int = 4):
    """Array shapes, including 0-d, empty (a 0 dimension) and length-1 dimensions."""
    return hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side,
                            max_side=max_side)


def dtypes(choices=DTYPES):
    """Dtype names drawn from `choices` (default: float32, float64, int32, int64, bool)."""
    return st.sampled_from(tuple(choices))


def broadcastable_shapes(num_shapes: int = 2, min_dims: int = 0, max_dims: int = 3,
                         min_side: int = 0, max_side: int = 4):
    """A tuple of `num_shapes` shapes that broadcast together under numpy's rules (different
    ndims, length-1 dimensions against longer ones)."""
    return hnp.mutually_broadcastable_shapes(
        num_shapes=num_shapes, min_dims=min_dims, max_dims=max_dims, min_side=min_side,
        max_side=max_side).map(lambda bs: bs.input_shapes)


@st.composite
def symbolic_shape(draw, shape):
    """A symbolic shape for run-time `shape`: each entry is the int itself or None."""
    return tuple(draw(st.sampled_from((s, None))) for s in shape)


def layouts():
    """Memory layouts for `with_layout`."""
    return st.sampled_from(LAYOUTS)


def seeds():
    """Seeds for `np.random.default_rng`."""
    return st.integers(0, 2**32 - 1)
