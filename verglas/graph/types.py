"""Types of graph variables: immutable, hashable descriptions of the values they hold."""

from __future__ import annotations

import numpy as np

__all__ = ["Type", "TensorType", "ScalarType", "as_dtype"]


def as_dtype(dtype) -> str:
    """Normalise a dtype-like (str, np.dtype, Python type) to numpy's canonical name."""
    if dtype in _SUPPORTED and type(dtype) is str:  # the usual case: already a name
        return dtype
    name = np.dtype(dtype).name
    if name not in _SUPPORTED:
        raise TypeError(f"unsupported dtype {name!r}; verglas supports {sorted(_SUPPORTED)}")
    return name


_SUPPORTED = frozenset(
    "bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 float16 float32 float64 "
    "complex64 complex128".split()
)


class Type:
    """Base class: a Type is an immutable value; equality and hash come from `_key()`."""

    __slots__ = ("_hash",)

    def _key(self) -> tuple:
        raise NotImplementedError

    def __eq__(self, other):
        return self is other or (type(self) is type(other) and self._key() == other._key())

    def __hash__(self):
        try:
            return self._hash
        except AttributeError:
            h = hash((type(self).__name__, self._key()))
            object.__setattr__(self, "_hash", h)
            return h

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __reduce__(self):
        return (type(self), self._key())

    def make_variable(self, name: str | None = None):
        """A fresh Variable of this type (the class is chosen by the array language)."""
        return self.variable_class(self, None, None, name)

    def filter(self, value, name: str = "value"):
        """Convert a run-time value to this type or raise TypeError naming `name`."""
        raise NotImplementedError


class ScalarType(Type):
    """A scalar of one dtype: the type of variables inside a Composite's scalar graph."""

    __slots__ = ("dtype",)
    variable_class = None  # set by verglas.graph.basic

    def __init__(self, dtype):
        object.__setattr__(self, "dtype", as_dtype(dtype))

    def _key(self):
        return (self.dtype,)

    @property
    def ndim(self) -> int:
        return 0

    @property
    def shape(self) -> tuple:
        return ()

    def filter(self, value, name: str = "value"):
        arr = np.asarray(value)
        if arr.ndim != 0:
            raise TypeError(f"{name}: expected a scalar, got an array of ndim {arr.ndim}")
        return _cast_safely(arr, self.dtype, name)[()]

    def __repr__(self):
        return f"ScalarType({self.dtype})"

    def __str__(self):
        return self.dtype


class TensorType(Type):
    """An n-d array type: dtype plus a static shape whose entries are ints or None."""

    __slots__ = ("dtype", "shape")
    variable_class = None  # set by verglas.ops when the array language is imported
    constant_class = None

    def __init__(self, dtype, shape=()):
        shape = tuple(None if s is None else int(s) for s in shape)
        if any(s is not None and s < 0 for s in shape):
            raise ValueError(f"TensorType: negative static dimension in shape {shape}")
        object.__setattr__(self, "dtype", as_dtype(dtype))
        object.__setattr__(self, "shape", shape)

    def _key(self):
        return (self.dtype, self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def clone(self, dtype=None, shape=None) -> TensorType:
        """This type with `dtype` and/or `shape` replaced (self when nothing changes)."""
        dtype = self.dtype if dtype is None else as_dtype(dtype)
        shape = self.shape if shape is None else tuple(shape)
        if dtype == self.dtype and shape == self.shape:
            return self
        return TensorType(dtype, shape)

    def is_super(self, other: Type) -> bool:
        """True when every value of `other` is a value of self (self is less specific)."""
        return (
            isinstance(other, TensorType)
            and other.dtype == self.dtype
            and other.ndim == self.ndim
            and all(s is None or s == o for s, o in zip(self.shape, other.shape))
        )

    def filter(self, value, name: str = "value"):
        arr = value if isinstance(value, np.ndarray) else np.asarray(value)
        if arr.ndim != self.ndim:
            raise TypeError(
                f"{name}: expected an array of ndim {self.ndim} ({self}), got ndim {arr.ndim}"
            )
        for axis, (want, got) in enumerate(zip(self.shape, arr.shape)):
            if want is not None and want != got:
                raise ValueError(
                    f"{name}: dimension {axis} has length {got}, but the static shape "
                    f"{_shape_str(self.shape)} requires {want}"
                )
        return _cast_safely(arr, self.dtype, name)

    def __repr__(self):
        return f"TensorType({self.dtype}, shape={self.shape})"

    def __str__(self):
        return f"Tensor({self.dtype}, shape={_shape_str(self.shape)})"


def _shape_str(shape) -> str:
    inner = ", ".join("?" if s is None else str(s) for s in shape)
    return f"({inner},)" if len(shape) == 1 else f"({inner})"


def _cast_safely(arr: np.ndarray, dtype: str, name: str) -> np.ndarray:
    if arr.dtype.name == dtype:
        return arr
    if arr.dtype == object or not np.can_cast(arr.dtype, dtype, "safe"):
        # Python ints and floats given as scalars convert when the value survives.
        if arr.ndim == 0 and arr.dtype.kind in "biuf" and _value_survives(arr, dtype):
            return arr.astype(dtype)
        raise TypeError(
            f"{name}: expected dtype {dtype}, got {arr.dtype.name}, which cannot be cast "
            f"without loss"
        )
    return arr.astype(dtype)


def _value_survives(arr: np.ndarray, dtype: str) -> bool:
    with np.errstate(all="ignore"):
        converted = arr.astype(dtype)
        back = converted.astype(arr.dtype)
    if arr.dtype.kind == "f" and np.isnan(arr):
        return bool(np.isnan(back))
    return bool(back == arr)
