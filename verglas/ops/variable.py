"""Tensor variables with numpy-like operators, and the input constructors `tensor`, `scalar`.

The top of the array language: TensorVariable's operators and methods are the functions of the
modules below, and the graph layer makes node outputs and constants of a tensor type
TensorVariables (TensorType.variable_class / constant_class, set here). An op whose gradient
needs a function of a module above its own calls it through the variables it is given
(`g.sum(axes)`, `x.shape[i]`, `g[idx]`), so the modules import one way. `constant` and
`as_tensor` are in basic.py.
"""

from __future__ import annotations

from verglas.graph.basic import Constant, Variable
from verglas.graph.types import TensorType
from verglas.ops import indexing, linalg
from verglas.ops import basic as b
from verglas.ops import math as m
from verglas.ops import reduce as r
from verglas.ops import shape as sh

__all__ = ["TensorVariable", "TensorConstant", "tensor", "scalar"]


class TensorVariable(Variable):
    """A symbolic array: numpy-like operators build graph nodes."""

    __slots__ = ()
    __array_ufunc__ = None  # numpy array (op) variable defers to our reflected operators

    # arithmetic
    def __add__(self, other): return m.add(self, other)
    def __radd__(self, other): return m.add(other, self)
    def __sub__(self, other): return m.sub(self, other)
    def __rsub__(self, other): return m.sub(other, self)
    def __mul__(self, other): return m.mul(self, other)
    def __rmul__(self, other): return m.mul(other, self)
    def __truediv__(self, other): return m.true_divide(self, other)
    def __rtruediv__(self, other): return m.true_divide(other, self)
    def __floordiv__(self, other): return m.floor_divide(self, other)
    def __rfloordiv__(self, other): return m.floor_divide(other, self)
    def __mod__(self, other): return m.mod(self, other)
    def __rmod__(self, other): return m.mod(other, self)
    def __pow__(self, other): return m.power(self, other)
    def __rpow__(self, other): return m.power(other, self)
    def __neg__(self): return m.neg(self)
    def __pos__(self):
        if self.dtype == "bool":  # as numpy's positive
            raise TypeError(f"positive: not supported for dtype bool ({self!r})")
        return self

    def __abs__(self): return m.abs(self)
    def __invert__(self): return m.invert(self)
    def __and__(self, other): return m.bitwise_and(self, other)
    def __rand__(self, other): return m.bitwise_and(other, self)
    def __or__(self, other): return m.bitwise_or(self, other)
    def __ror__(self, other): return m.bitwise_or(other, self)
    def __xor__(self, other): return m.bitwise_xor(self, other)
    def __rxor__(self, other): return m.bitwise_xor(other, self)
    def __lshift__(self, other): return m.left_shift(self, other)
    def __rlshift__(self, other): return m.left_shift(other, self)
    def __rshift__(self, other): return m.right_shift(self, other)
    def __rrshift__(self, other): return m.right_shift(other, self)
    # comparisons (== and != stay identity: variables are dict keys; use vg.eq / vg.neq)
    def __lt__(self, other): return m.lt(self, other)
    def __le__(self, other): return m.le(self, other)
    def __gt__(self, other): return m.gt(self, other)
    def __ge__(self, other): return m.ge(self, other)
    __hash__ = Variable.__hash__

    def __matmul__(self, other): return linalg.matmul(self, other)
    def __rmatmul__(self, other): return linalg.matmul(other, self)

    def __bool__(self):
        raise TypeError(f"{self!r} is symbolic: its truth value is only known at run time")

    def __len__(self):
        raise TypeError(f"{self!r} is symbolic: use .shape[0]")

    def __iter__(self):
        raise TypeError(f"{self!r} is symbolic and cannot be iterated")

    def __getitem__(self, index):
        return indexing.getitem(self, index)

    # array attributes and methods
    @property
    def shape(self):
        return b.shape(self)

    @property
    def size(self):
        return r.prod(self.shape)

    @property
    def T(self):
        return b.transpose(self)

    def transpose(self, *axes):
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        return b.transpose(self, axes or None)

    def astype(self, dtype):
        return m.cast(self, dtype)

    def reshape(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list, Variable)):
            shape = shape[0]
        return sh.reshape(self, shape)

    def flatten(self):
        return sh.reshape(self, (-1,))

    def dimshuffle(self, *order):
        return b.dimshuffle(self, order)

    def sum(self, axis=None, keepdims=False): return r.sum(self, axis, keepdims)
    def mean(self, axis=None, keepdims=False): return r.mean(self, axis, keepdims)
    def max(self, axis=None, keepdims=False): return r.max(self, axis, keepdims)
    def min(self, axis=None, keepdims=False): return r.min(self, axis, keepdims)
    def prod(self, axis=None, keepdims=False): return r.prod(self, axis, keepdims)
    def var(self, axis=None, keepdims=False): return r.var(self, axis, keepdims)
    def std(self, axis=None, keepdims=False): return r.std(self, axis, keepdims)
    def any(self, axis=None, keepdims=False): return r.any(self, axis, keepdims)
    def all(self, axis=None, keepdims=False): return r.all(self, axis, keepdims)
    def argmax(self, axis=None, keepdims=False):
        return r.argmax(self, axis, keepdims)

    def argmin(self, axis=None, keepdims=False):
        return r.argmin(self, axis, keepdims)


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
