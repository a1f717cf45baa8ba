"""Op: the operation of an Apply node. Equality and hash come from the class and `__props__`."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

__all__ = ["Op", "stable_key"]


class Op:
    """Base class of all operations.

    Subclasses declare `__props__`, the attribute names that define the op; two ops are equal
    when their classes and props are. An op implements `make_node`, `perform` (the numpy
    reference), `infer_shape` and `L_op`, and declares `destroy_map`/`view_map` (output index ->
    list of input indices) when outputs overwrite or alias inputs.
    """

    __props__: ClassVar[tuple[str, ...]] = ()
    destroy_map: ClassVar[dict[int, list[int]]] = {}
    view_map: ClassVar[dict[int, list[int]]] = {}
    # Roles the scheduler and the backends read (never an op's class name):
    # the frozen graph an inner-graph op runs (OpFromGraph, Scan): lowered to a sub-Program
    inner_graph: Any = None
    # outputs depend on the inputs' shapes only, never on their values (Shape, ShapeI)
    reads_shape_only: ClassVar[bool] = False
    # a few scalar statements wherever it runs, never a loop or a kernel (MakeVector)
    runs_inline: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "__match_args__" not in cls.__dict__:
            cls.__match_args__ = tuple(cls.__props__)

    def _props(self) -> tuple:
        return tuple(getattr(self, name) for name in self.__props__)

    def __eq__(self, other):
        if self is other:
            return True
        return type(self) is type(other) and self._props() == other._props()

    def __hash__(self):
        h = self.__dict__.get("_op_hash")
        if h is None:
            h = hash((type(self), self._props()))
            self.__dict__["_op_hash"] = h
        return h

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_op_hash", None)
        return state

    def __repr__(self):
        if not self.__props__:
            return type(self).__name__
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__props__)
        return f"{type(self).__name__}{{{inner}}}"

    def __str__(self):
        return repr(self)

    # -- the semantics every op provides -------------------------------------------------------
    def make_node(self, *inputs):
        """Build an Apply of this op on `inputs`, checking types (raise naming the op)."""
        raise NotImplementedError

    def __call__(self, *inputs, **kwargs):
        node = self.make_node(*inputs, **kwargs)
        return node.outputs[0] if len(node.outputs) == 1 else list(node.outputs)

    def perform(self, node, inputs: list, outputs: list) -> None:
        """Compute outputs in numpy: store each result in `outputs[i][0]`."""
        raise NotImplementedError(f"{type(self).__name__} has no perform")

    def infer_shape(self, fgraph, node, input_shapes: list) -> list:
        """Symbolic output shapes (tuples of scalar variables) from symbolic input shapes."""
        raise NotImplementedError(f"{type(self).__name__} has no infer_shape")

    def L_op(self, inputs, outputs, output_grads) -> list:
        """Reverse-mode gradient: one variable (or None when disconnected) per input."""
        raise NotImplementedError(f"{type(self).__name__} has no gradient")

    def fingerprint_key(self) -> tuple:
        """A process-independent description of this op, used by graph fingerprints."""
        cls = type(self)
        return (f"{cls.__module__}.{cls.__qualname__}",) + tuple(
            stable_key(v) for v in self._props()
        )

    def clone(self) -> Op:
        """Ops are immutable values: a clone is the op itself."""
        return self


def stable_key(value: Any):
    """A representation of `value` that is the same in every process (no id/hash based reprs)."""
    if value is None or isinstance(value, (bool, int, float, str, bytes, complex)):
        return (type(value).__name__, repr(value))
    if isinstance(value, (tuple, list)):
        return (type(value).__name__,) + tuple(stable_key(v) for v in value)
    if isinstance(value, (frozenset, set)):
        return ("set",) + tuple(sorted(repr(stable_key(v)) for v in value))
    if isinstance(value, dict):
        return ("dict",) + tuple(
            sorted((repr(stable_key(k)), stable_key(v)) for k, v in value.items())
        )
    if hasattr(value, "fingerprint"):
        return ("graph", value.fingerprint())
    if hasattr(value, "fingerprint_key"):
        return value.fingerprint_key()
    if isinstance(value, np.dtype):
        return ("dtype", value.name)
    if isinstance(value, np.ndarray):
        return ("ndarray", value.dtype.name, value.shape, value.tobytes().hex())
    if isinstance(value, np.generic):
        return ("npscalar", value.dtype.name, repr(value.item()))
    if hasattr(value, "_key"):  # Types
        return (type(value).__name__,) + tuple(stable_key(v) for v in value._key())
    if isinstance(value, type):
        return ("class", f"{value.__module__}.{value.__qualname__}")
    if isinstance(value, slice):
        return ("slice", stable_key(value.start), stable_key(value.stop), stable_key(value.step))
    raise TypeError(f"cannot build a stable key for {type(value).__name__} {value!r}")
