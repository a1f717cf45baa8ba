"""Tensor variables with numpy-like operators, and the constructors `tensor`, `constant`,
`as_tensor`."""

from __future__ import annotations

import numbers

import numpy as np

from verglas.graph.basic import Constant, Variable
from verglas.graph.types import TensorType

__all__ = ["TensorVariable", "TensorConstant", "tensor", "scalar", "constant", "as_tensor",
           "is_python_scalar"]


def _m():
    from verglas.ops import math

    return math


def _mod(name):
    import importlib

    return importlib.import_module(f"verglas.ops.{name}")


class TensorVariable(Variable):
    """A symbolic array: numpy-like operators build graph nodes."""

    __slots__ = ()
    __array_ufunc__ = None  # numpy array (op) variable defers to our reflected operators

    # arithmetic
    def __add__(self, other): return _m().add(self, other)
    def __radd__(self, other): return _m().add(other, self)
    def __sub__(self, other): return _m().sub(self, other)
    def __rsub__(self, other): return _m().sub(other, self)
    def __mul__(self, other): return _m().mul(self, other)
    def __rmul__(self, other): return _m().mul(other, self)
    def __truediv__(self, other): return _m().true_divide(self, other)
    def __rtruediv__(self, other): return _m().true_divide(other, self)
    def __floordiv__(self, other): return _m().floor_divide(self, other)
    def __rfloordiv__(self, other): return _m().floor_divide(other, self)
    def __mod__(self, other): return _m().mod(self, other)
    def __rmod__(self, other): return _m().mod(other, self)
    def __pow__(self, other): return _m().power(self, other)
    def __rpow__(self, other): return _m().power(other, self)
    def __neg__(self): return _m().neg(self)
    def __pos__(self):
        if self.dtype == "bool":  # as numpy's positive
            raise TypeError(f"positive: not supported for dtype bool ({self!r})")
        return self

    def __abs__(self): return _m().abs(self)
    def __invert__(self): return _m().invert(self)
    def __and__(self, other): return _m().bitwise_and(self, other)
    def __rand__(self, other): return _m().bitwise_and(other, self)
    def __or__(self, other): return _m().bitwise_or(self, other)
    def __ror__(self, other): return _m().bitwise_or(other, self)
    def __xor__(self, other): return _m().bitwise_xor(self, other)
    def __rxor__(self, other): return _m().bitwise_xor(other, self)
    def __lshift__(self, other): return _m().left_shift(self, other)
    def __rlshift__(self, other): return _m().left_shift(other, self)
    def __rshift__(self, other): return _m().right_shift(self, other)
    def __rrshift__(self, other): return _m().right_shift(other, self)
    # comparisons (== and != stay identity: variables are dict keys; use vg.eq / vg.neq)
    def __lt__(self, other): return _m().lt(self, other)
    def __le__(self, other): return _m().le(self, other)
    def __gt__(self, other): return _m().gt(self, other)
    def __ge__(self, other): return _m().ge(self, other)
    __hash__ = Variable.__hash__

    def __matmul__(self, other): return _mod("linalg").matmul(self, other)
    def __rmatmul__(self, other): return _mod("linalg").matmul(other, self)

    def __bool__(self):
        raise TypeError(f"{self!r} is symbolic: its truth value is only known at run time")

    def __len__(self):
        raise TypeError(f"{self!r} is symbolic: use .shape[0]")

    def __iter__(self):
        raise TypeError(f"{self!r} is symbolic and cannot be iterated")

    def __getitem__(self, index):
        return _mod("indexing").getitem(self, index)

    # array attributes and methods
    @property
    def shape(self):
        return _mod("shape").shape(self)

    @property
    def size(self):
        return _mod("reduce").prod(self.shape)

    @property
    def T(self):
        return _mod("elemwise").transpose(self)

    def transpose(self, *axes):
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        return _mod("elemwise").transpose(self, axes or None)

    def astype(self, dtype):
        return _m().cast(self, dtype)

    def reshape(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list, Variable)):
            shape = shape[0]
        return _mod("shape").reshape(self, shape)

    def flatten(self):
        return _mod("shape").reshape(self, (-1,))

    def dimshuffle(self, *order):
        return _mod("elemwise").dimshuffle(self, order)

    def sum(self, axis=None, keepdims=False): return _mod("reduce").sum(self, axis, keepdims)
    def mean(self, axis=None, keepdims=False): return _mod("reduce").mean(self, axis, keepdims)
    def max(self, axis=None, keepdims=False): return _mod("reduce").max(self, axis, keepdims)
    def min(self, axis=None, keepdims=False): return _mod("reduce").min(self, axis, keepdims)
    def prod(self, axis=None, keepdims=False): return _mod("reduce").prod(self, axis, keepdims)
    def var(self, axis=None, keepdims=False): return _mod("reduce").var(self, axis, keepdims)
    def std(self, axis=None, keepdims=False): return _mod("reduce").std(self, axis, keepdims)
    def any(self, axis=None, keepdims=False): return _mod("reduce").any(self, axis, keepdims)
    def all(self, axis=None, keepdims=False): return _mod("reduce").all(self, axis, keepdims)
    def argmax(self, axis=None, keepdims=False):
        return _mod("reduce").argmax(self, axis, keepdims)

    def argmin(self, axis=None, keepdims=False):
        return _mod("reduce").argmin(self, axis, keepdims)


class TensorConstant(TensorVariable, Constant):
    """A constant array with the operators of TensorVariable."""

    __slots__ = ()

    def __init__(self, type, data, name=None):
        Constant.__init__(self, type, data, name)


TensorType.variable_class = TensorVariable
TensorType.constant_class = TensorConstant


def tensor(name: str | None = None, shape=None, dtype="float64", ndim: int | None = None):
    """A symbolic array input: `shape` entries are ints or None (known at run time)."""
    if shape is None:
        shape = (None,) * (ndim or 0)
    elif ndim is not None and ndim != len(shape):
        raise ValueError(f"tensor {name!r}: ndim={ndim} contradicts shape={shape}")
    return TensorVariable(TensorType(dtype, tuple(shape)), None, None, name)


def scalar(name: str | None = None, dtype="float64"):
    """A symbolic 0-d array input."""
    return tensor(name, (), dtype)


def is_python_scalar(x) -> bool:
    return isinstance(x, (bool, numbers.Number)) and not isinstance(x, (np.generic, np.ndarray))


def constant(value, dtype=None, name: str | None = None) -> TensorConstant:
    """A constant array (Python floats default to float64, ints to int64 where it holds them)."""
    if isinstance(value, Variable):
        raise TypeError(f"constant: {value!r} is already symbolic")
    arr = np.asarray(value, dtype=dtype)
    if arr.dtype == object:
        raise TypeError(f"constant: cannot make an array of {value!r}")
    if dtype is None and is_python_scalar(value) and isinstance(value, int) \
            and not isinstance(value, bool) and -2**63 <= value < 2**63:
        arr = np.asarray(value, dtype="int64")  # (numpy's own choice beyond: uint64)
    return TensorConstant(TensorType(arr.dtype, arr.shape), arr, name)


def as_tensor(x, dtype=None, name: str | None = None) -> TensorVariable:
    """`x` as a tensor variable: variables pass through, values become constants."""
    if isinstance(x, Variable):
        if not isinstance(x.type, TensorType):
            raise TypeError(f"as_tensor: {x!r} has type {x.type}, not a tensor type")
        if dtype is not None and np.dtype(dtype).name != x.dtype:
            return _m().cast(x, dtype)
        return x
    if isinstance(x, (list, tuple)) and any(isinstance(e, Variable) for e in _flat(x)):
        return _mod("shape").stack([as_tensor(e, dtype) for e in x])
    return constant(x, dtype, name)


def _flat(x):
    for e in x:
        if isinstance(e, (list, tuple)):
            yield from _flat(e)
        else:
            yield e
