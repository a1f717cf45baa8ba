"""Reductions (sum, prod, max, min, any, all, argmax, argmin, cumsum) and the compositions
built on them (mean, var, std)."""

from __future__ import annotations

import builtins

import numpy as np

from verglas.graph.basic import Apply, Variable
from verglas.graph.op import Op
from verglas.graph.types import TensorType
from verglas.ops import math as m
from verglas.ops.basic import as_tensor, constant, expand_dims, normalize_axis, shape_i, shape_str

__all__ = ["Reduce", "Sum", "Prod", "Max", "Min", "Any", "All", "Argmax", "Argmin", "CumSum",
           "sum", "prod", "max", "min", "any", "all", "argmax", "argmin", "mean", "var", "std",
           "cumsum"]

_INT = "int64"


def _reduced_shape(shape, axes, keepdims):
    if keepdims:
        return tuple(1 if a in axes else s for a, s in enumerate(shape))
    return tuple(s for a, s in enumerate(shape) if a not in axes)


def _is_float(dtype) -> bool:
    return np.dtype(dtype).kind in "fc"


class Reduce(Op):
    """Base of the reductions: `axis` is a sorted tuple of non-negative axes."""

    __props__ = ("axis", "keepdims")
    ufunc: np.ufunc
    has_identity = True

    def __init__(self, axis: tuple[int, ...], keepdims: bool = False):
        self.axis = tuple(int(a) for a in axis)
        self.keepdims = bool(keepdims)

    def __repr__(self):
        kd = ", keepdims" if self.keepdims else ""
        return f"{type(self).__name__}{{axis={self.axis}{kd}}}"

    def output_dtype(self, dtype: str) -> str:
        return self.ufunc.reduce(np.zeros(1, dtype=dtype)).dtype.name

    def make_node(self, x):
        x = as_tensor(x)
        if builtins.any(not 0 <= a < x.ndim for a in self.axis):
            raise ValueError(f"{self}: axis out of range for input {x.type}")
        if not self.has_identity:
            for a in self.axis:
                if x.type.shape[a] == 0:
                    raise ValueError(
                        f"{self}: reduction over axis {a} of length 0 in shape "
                        f"{shape_str(x.type.shape)} has no identity")
        shape = _reduced_shape(x.type.shape, self.axis, self.keepdims)
        return Apply(self, [x], [TensorType(self.output_dtype(x.dtype), shape)])

    def perform(self, node, inputs, outputs):
        (x,) = inputs
        try:
            out = self.ufunc.reduce(x, axis=self.axis, keepdims=self.keepdims)
        except ValueError as exc:
            raise ValueError(f"{self}: input of shape {x.shape}: {exc}") from None
        outputs[0][0] = np.asarray(out, dtype=node.outputs[0].dtype)

    def infer_shape(self, fgraph, node, input_shapes):
        (shape,) = input_shapes
        one = constant(1, _INT)
        if self.keepdims:
            return [tuple(one if a in self.axis else s for a, s in enumerate(shape))]
        return [tuple(s for a, s in enumerate(shape) if a not in self.axis)]

    def with_axes(self, axis, keepdims: bool) -> Reduce:
        """This reduction over other axes (its other properties kept)."""
        extra = {p: getattr(self, p) for p in self.__props__ if p not in ("axis", "keepdims")}
        return type(self)(axis, keepdims, **extra)

    def _keep(self, var):
        """`var` (an output-shaped value) with the reduced axes put back as length 1."""
        return var if self.keepdims else expand_dims(var, self.axis)

    def L_op(self, inputs, outputs, output_grads):
        return [None]


class Sum(Reduce):
    """Sum over `axis` (numpy dtypes: small ints and bool accumulate in the platform int)."""

    ufunc = np.add

    def output_dtype(self, dtype):
        return np.sum(np.zeros(1, dtype=dtype)).dtype.name

    def perform(self, node, inputs, outputs):
        (x,) = inputs
        out = np.sum(x, axis=self.axis, keepdims=self.keepdims)
        outputs[0][0] = np.asarray(out, dtype=node.outputs[0].dtype)

    def L_op(self, inputs, outputs, output_grads):
        (x,), (g,) = inputs, output_grads
        if not _is_float(x.dtype):
            return [None]
        return [m.second(x, self._keep(g).astype(x.dtype))]


class Prod(Reduce):
    """Product over `axis` (numpy dtypes)."""

    ufunc = np.multiply

    def output_dtype(self, dtype):
        return np.prod(np.zeros(1, dtype=dtype)).dtype.name

    def perform(self, node, inputs, outputs):
        (x,) = inputs
        out = np.prod(x, axis=self.axis, keepdims=self.keepdims)
        outputs[0][0] = np.asarray(out, dtype=node.outputs[0].dtype)

    def L_op(self, inputs, outputs, output_grads):
        (x,), (g,) = inputs, output_grads
        if not _is_float(x.dtype):
            return [None]
        # d prod / d x_i = product of the others: exact with zeros (one zero: only its own
        # gradient survives; two or more: all vanish), no division by zero.
        is_zero = m.eq(x, 0)
        safe = m.where(is_zero, 1, x)
        prod_nonzero = Prod(self.axis, True)(safe)
        n_zeros = Sum(self.axis, True)(is_zero)
        others = m.where(
            is_zero,
            m.where(m.eq(n_zeros, 1), prod_nonzero, 0),
            m.where(m.eq(n_zeros, 0), prod_nonzero / safe, 0),
        )
        return [(self._keep(g) * others).astype(x.dtype)]


class _Extremum(Reduce):
    """numpy's max/min: an empty axis raises ValueError, unless `empty_ok`: then its result is
    the identity (-inf for max, +inf for min, the dtype's extreme for integers), as numpy's
    `initial=`. The softmax family's shift uses that, so an empty axis gives an empty softmax
    and a -inf logsumexp."""

    __props__ = ("axis", "keepdims", "empty_ok")

    def __init__(self, axis: tuple[int, ...], keepdims: bool = False, empty_ok: bool = False):
        super().__init__(axis, keepdims)
        self.empty_ok = bool(empty_ok)

    @property
    def has_identity(self) -> bool:
        return self.empty_ok

    def __repr__(self):
        extra = (", keepdims" if self.keepdims else "") + (", empty_ok" if self.empty_ok else "")
        return f"{type(self).__name__}{{axis={self.axis}{extra}}}"

    def perform(self, node, inputs, outputs):
        (x,) = inputs
        if not self.empty_ok:
            return super().perform(node, inputs, outputs)
        out = self.ufunc.reduce(x, axis=self.axis, keepdims=self.keepdims,
                                initial=self.identity(x.dtype))
        outputs[0][0] = np.asarray(out, dtype=node.outputs[0].dtype)

    def identity(self, dtype):
        """The value of an empty reduction with `empty_ok`."""
        dtype = np.dtype(dtype)
        largest = self.ufunc is np.minimum
        if dtype.kind == "f":
            return np.inf if largest else -np.inf
        if dtype.kind == "b":
            return largest
        info = np.iinfo(dtype)
        return info.max if largest else info.min

    def L_op(self, inputs, outputs, output_grads):
        (x,), (out,), (g,) = inputs, outputs, output_grads
        if not _is_float(x.dtype):
            return [None]
        # ties share the gradient equally, as JAX does
        mask = m.cast(m.eq(x, self._keep(out)), x.dtype)
        count = Sum(self.axis, True)(mask)
        return [(self._keep(g) * mask / count).astype(x.dtype)]


class Max(_Extremum):
    """Maximum over `axis` (NaN propagates, as numpy)."""

    ufunc = np.maximum


class Min(_Extremum):
    """Minimum over `axis` (NaN propagates, as numpy)."""

    ufunc = np.minimum


class Any(Reduce):
    """True where any element along `axis` is nonzero."""

    ufunc = np.logical_or

    def output_dtype(self, dtype):
        return "bool"

    def perform(self, node, inputs, outputs):
        outputs[0][0] = np.asarray(np.any(inputs[0], axis=self.axis, keepdims=self.keepdims))


class All(Reduce):
    """True where all elements along `axis` are nonzero."""

    ufunc = np.logical_and

    def output_dtype(self, dtype):
        return "bool"

    def perform(self, node, inputs, outputs):
        outputs[0][0] = np.asarray(np.all(inputs[0], axis=self.axis, keepdims=self.keepdims))


class Argmax(Op):
    """Index (int64) of the first maximum along `axis` (None: of the flattened input)."""

    __props__ = ("axis", "keepdims")
    nfunc = staticmethod(np.argmax)

    def __init__(self, axis: int | None, keepdims: bool = False):
        self.axis = None if axis is None else int(axis)
        self.keepdims = bool(keepdims)

    def make_node(self, x):
        x = as_tensor(x)
        axes = tuple(range(x.ndim)) if self.axis is None else (self.axis,)
        if self.axis is not None and not 0 <= self.axis < x.ndim:
            raise ValueError(f"{self}: axis out of range for input {x.type}")
        if self.axis is None and x.ndim == 0:
            axes = ()
        if builtins.any(x.type.shape[a] == 0 for a in axes):
            raise ValueError(f"{self}: empty axis in shape {shape_str(x.type.shape)}")
        shape = _reduced_shape(x.type.shape, axes, self.keepdims)
        return Apply(self, [x], [TensorType(_INT, shape)])

    def perform(self, node, inputs, outputs):
        (x,) = inputs
        try:
            out = self.nfunc(x, axis=self.axis, keepdims=self.keepdims)
        except ValueError as exc:
            raise ValueError(f"{self}: input of shape {x.shape}: {exc}") from None
        outputs[0][0] = np.asarray(out, dtype=_INT)

    def infer_shape(self, fgraph, node, input_shapes):
        (shape,) = input_shapes
        axes = range(len(shape)) if self.axis is None else (self.axis,)
        one = constant(1, _INT)
        if self.keepdims:
            return [tuple(one if a in axes else s for a, s in enumerate(shape))]
        return [tuple(s for a, s in enumerate(shape) if a not in axes)]

    def L_op(self, inputs, outputs, output_grads):
        return [None]


class Argmin(Argmax):
    """Index (int64) of the first minimum along `axis` (None: of the flattened input)."""

    nfunc = staticmethod(np.argmin)


class CumSum(Op):
    """Cumulative sum along `axis` (None: of the flattened input, a vector)."""

    __props__ = ("axis",)

    def __init__(self, axis: int | None):
        self.axis = None if axis is None else int(axis)

    def make_node(self, x):
        x = as_tensor(x)
        dtype = np.cumsum(np.zeros(1, dtype=x.dtype)).dtype.name
        if self.axis is None:
            size = None
            if builtins.all(s is not None for s in x.type.shape):
                size = int(np.prod(x.type.shape, dtype=_INT))
            return Apply(self, [x], [TensorType(dtype, (size,))])
        if not 0 <= self.axis < x.ndim:
            raise ValueError(f"{self}: axis out of range for input {x.type}")
        return Apply(self, [x], [TensorType(dtype, x.type.shape)])

    def perform(self, node, inputs, outputs):
        out = np.cumsum(inputs[0], axis=self.axis)
        outputs[0][0] = np.asarray(out, dtype=node.outputs[0].dtype)

    def infer_shape(self, fgraph, node, input_shapes):
        (shape,) = input_shapes
        if self.axis is None:
            static = node.outputs[0].type.shape[0]
            if static is not None:
                return [(constant(static, _INT),)]
            size = constant(1, _INT)
            for s in shape:
                size = size * s
            return [(size,)]
        return [tuple(shape)]

    def L_op(self, inputs, outputs, output_grads):
        (x,), (g,) = inputs, output_grads
        if not _is_float(x.dtype):
            return [None]
        # the gradient of a cumulative sum is the reversed cumulative sum of the gradient
        # (indexing and reshape build on this module: the variables' methods reach them)
        axis = 0 if self.axis is None else self.axis
        flip = (slice(None),) * axis + (slice(None, None, -1),)
        rev = CumSum(axis)(g[flip])[flip]
        if self.axis is None:
            rev = rev.reshape(x.shape)
        return [rev.astype(x.dtype)]


# -- user functions -------------------------------------------------------------------------------
def _reduce(cls, name, x, axis, keepdims):
    x = as_tensor(x)
    return cls(normalize_axis(axis, x.ndim, name), keepdims)(x)


def sum(x, axis=None, keepdims: bool = False) -> Variable:
    """Sum of `x` over `axis` (numpy dtypes: int32 and bool sum to int64)."""
    return _reduce(Sum, "sum", x, axis, keepdims)


def prod(x, axis=None, keepdims: bool = False) -> Variable:
    """Product of `x` over `axis`."""
    return _reduce(Prod, "prod", x, axis, keepdims)


def max(x, axis=None, keepdims: bool = False) -> Variable:
    """Maximum of `x` over `axis` (ValueError at run time for an empty axis)."""
    return _reduce(Max, "max", x, axis, keepdims)


def min(x, axis=None, keepdims: bool = False) -> Variable:
    """Minimum of `x` over `axis` (ValueError at run time for an empty axis)."""
    return _reduce(Min, "min", x, axis, keepdims)


def any(x, axis=None, keepdims: bool = False) -> Variable:
    """Whether any element of `x` over `axis` is nonzero."""
    return _reduce(Any, "any", x, axis, keepdims)


def all(x, axis=None, keepdims: bool = False) -> Variable:
    """Whether all elements of `x` over `axis` are nonzero."""
    return _reduce(All, "all", x, axis, keepdims)


def _arg(cls, name, x, axis, keepdims):
    x = as_tensor(x)
    if axis is not None:
        if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
            raise TypeError(f"{name}: axis must be None or an int, got {axis!r}")
        (axis,) = normalize_axis(axis, x.ndim, name)
    return cls(axis, keepdims)(x)


def argmax(x, axis=None, keepdims: bool = False) -> Variable:
    """Index of the first maximum of `x` along `axis` (None: flattened)."""
    return _arg(Argmax, "argmax", x, axis, keepdims)


def argmin(x, axis=None, keepdims: bool = False) -> Variable:
    """Index of the first minimum of `x` along `axis` (None: flattened)."""
    return _arg(Argmin, "argmin", x, axis, keepdims)


def _count(x, axes, dtype):
    """Number of elements over `axes` of `x`, as a 0-d of `dtype` (a constant when static)."""
    dims = [x.type.shape[a] for a in axes]
    if builtins.all(d is not None for d in dims):
        return constant(np.asarray(int(np.prod(dims, dtype=_INT)), dtype=dtype))
    n = constant(1, _INT)
    for a in axes:
        n = n * shape_i(x, a)
    return m.cast(n, dtype)


def _mean_dtype(dtype: str) -> str:
    return dtype if _is_float(dtype) else "float64"


def mean(x, axis=None, keepdims: bool = False) -> Variable:
    """Arithmetic mean over `axis` (float64 for integer and bool inputs, as numpy)."""
    x = as_tensor(x)
    axes = normalize_axis(axis, x.ndim, "mean")
    dtype = _mean_dtype(x.dtype)
    total = Sum(axes, keepdims)(x if _is_float(x.dtype) else x.astype(dtype))
    return total / _count(x, axes, dtype)


def var(x, axis=None, keepdims: bool = False) -> Variable:
    """Variance (ddof=0) over `axis`."""
    x = as_tensor(x)
    axes = normalize_axis(axis, x.ndim, "var")
    xf = x if _is_float(x.dtype) else x.astype("float64")
    centered = xf - mean(xf, axes, keepdims=True)
    if np.dtype(xf.dtype).kind == "c":  # |x - mean|**2 = re**2 + im**2, a real variance
        return mean(m.sqr(m.real(centered)) + m.sqr(m.imag(centered)), axes, keepdims)
    return mean(m.sqr(centered), axes, keepdims)


def std(x, axis=None, keepdims: bool = False) -> Variable:
    """Standard deviation (ddof=0) over `axis`."""
    return m.sqrt(var(x, axis, keepdims))


def cumsum(x, axis=None) -> Variable:
    """Cumulative sum along `axis`; None flattens first (as numpy)."""
    x = as_tensor(x)
    if axis is not None:
        (axis,) = normalize_axis(axis, x.ndim, "cumsum")
    return CumSum(axis)(x)
