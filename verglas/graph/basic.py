"""The nodes of a mutable graph: Variable, Constant and Apply."""

from __future__ import annotations

import weakref

import numpy as np

from verglas.graph.types import ScalarType, TensorType, Type

__all__ = ["Variable", "Constant", "Apply", "Node", "intern_constant", "is_interned_constant"]

# The constants of frozen graphs, interned by (type, bytes): the table is here rather than in
# frozen.py with the others because a pickled constant re-interns itself (Constant.__reduce__).
_CONSTANTS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


class Variable:
    """A value in a graph: the output `index` of its `owner` Apply, or a root (owner None)."""

    __slots__ = ("type", "owner", "index", "name", "__weakref__")

    def __init__(self, type: Type, owner=None, index=None, name=None):
        self.type = type
        self.owner = owner
        self.index = index
        self.name = name

    def __reduce_ex__(self, protocol):
        owner = self.owner
        if owner is not None and owner.frozen:
            # A frozen node's output unpickles as the canonical interned output.
            return (_frozen_output, (owner, self.index))
        return object.__reduce_ex__(self, protocol)

    @property
    def ndim(self) -> int:
        return self.type.ndim

    @property
    def dtype(self) -> str:
        return self.type.dtype

    def clone(self) -> Variable:
        """A new root variable of the same type and name."""
        return type(self)(self.type, None, None, self.name)

    def __repr__(self):
        if self.name is not None:
            return self.name
        if self.owner is not None:
            op = self.owner.op
            suffix = f".{self.index}" if len(self.owner.outputs) > 1 else ""
            return f"{type(op).__name__}.out{suffix}"
        return f"<{self.type}>"

    __str__ = __repr__


class Constant(Variable):
    """A root variable with a fixed, read-only value."""

    __slots__ = ("data", "_key")

    def __init__(self, type: Type, data, name=None):
        super().__init__(type, None, None, name)
        arr = np.array(data, dtype=type.dtype)  # always a private copy
        if arr.shape != tuple(type.shape) and isinstance(type, TensorType):
            raise ValueError(
                f"Constant: data of shape {arr.shape} does not match the type {type}"
            )
        arr.setflags(write=False)
        self.data = arr
        self._key = (type, arr.tobytes())

    def clone(self) -> Constant:
        return self

    def __reduce__(self):
        # An interned constant (one a frozen node reads) unpickles as the canonical one, so
        # that a frozen node pickled on its own re-interns to the very same node.
        return (_rebuild_constant,
                (type(self), self.type, self.data, self.name, is_interned_constant(self)))

    def __repr__(self):
        if self.name is not None:
            return self.name
        if self.data.size <= 8:
            text = np.array2string(self.data, separator=", ")
            return text if self.data.ndim else repr(self.data.item())
        return f"Constant{{{self.type}}}"

    __str__ = __repr__


def _rebuild_constant(cls, type, data, name, interned=False):
    const = cls(type, data, name)
    return intern_constant(const) if interned else const


def intern_constant(constant: Constant) -> Constant:
    """The canonical constant equal to `constant`: same type and bytes (NaN == NaN, 0.0 != -0.0)."""
    existing = _CONSTANTS.get(constant._key)
    if existing is not None:
        return existing
    _CONSTANTS[constant._key] = constant
    return constant


def is_interned_constant(constant: Constant) -> bool:
    """Whether `constant` is the canonical interned constant for its type and value."""
    return _CONSTANTS.get(constant._key) is constant


def interned_constant_count() -> int:
    """How many constants are interned (for leak tests)."""
    return len(_CONSTANTS)


def _frozen_output(node, index):
    return node.outputs[index]


class Node:
    """What every graph node offers: `op`, `inputs`, `outputs`."""

    __slots__ = ()
    frozen = False

    @property
    def nin(self) -> int:
        return len(self.inputs)

    @property
    def nout(self) -> int:
        return len(self.outputs)

    @property
    def out(self) -> Variable:
        """The single output of a one-output node."""
        (out,) = self.outputs
        return out

    def __repr__(self):
        args = ", ".join(repr(i) for i in self.inputs)
        return f"{self.op}({args})"


class Apply(Node):
    """A mutable node: `op` applied to `inputs` (a list), producing fresh `outputs`."""

    __slots__ = ("op", "inputs", "outputs", "__weakref__")

    def __init__(self, op, inputs, output_types):
        self.op = op
        self.inputs = list(inputs)
        for i, var in enumerate(self.inputs):
            if not isinstance(var, Variable):
                raise TypeError(f"{op}: input {i} is {type(var).__name__}, not a Variable")
        self.outputs = [
            (t.variable_class or Variable)(t, self, i, None) for i, t in enumerate(output_types)
        ]

    def clone_with_new_inputs(self, inputs, strict: bool = True) -> Apply:
        """An Apply of the same op on `inputs`; re-runs make_node when the types change."""
        if len(inputs) != len(self.inputs):
            raise ValueError(f"{self.op}: expected {len(self.inputs)} inputs, got {len(inputs)}")
        if all(new.type == old.type for new, old in zip(inputs, self.inputs)):
            return Apply(self.op, inputs, [o.type for o in self.outputs])
        node = self.op.make_node(*inputs)
        if strict and [o.type for o in node.outputs] != [o.type for o in self.outputs]:
            if not all(
                getattr(old.type, "is_super", lambda t: old.type == t)(new.type)
                for old, new in zip(self.outputs, node.outputs)
            ):
                raise TypeError(
                    f"{self.op}: new inputs change the output types "
                    f"{[str(o.type) for o in self.outputs]} -> "
                    f"{[str(o.type) for o in node.outputs]}"
                )
        return node


for _t in (Type, ScalarType, TensorType):
    if _t.__dict__.get("variable_class", None) is None:
        _t.variable_class = Variable
