"""Building generated Python source, shared by both backends: a line emitter with one name
allocator, and typed literals and casts (generated modules import `math` and `numpy as np`)."""

from __future__ import annotations

import contextlib
import math

import numpy as np

from verglas.graph.basic import Constant

__all__ = ["Emitter", "EmitContext", "np_dtype", "literal", "cast_expr", "any_of", "all_of"]


class Emitter:
    """Lines with indentation and one name allocator."""

    def __init__(self, depth: int = 0):
        self.lines: list[str] = []
        self.depth = depth
        self._counts: dict[str, int] = {}
        # names the code spells out itself (a kernel's parameters p0, o0, ...): never given out
        self._reserved: set[str] = set()

    def line(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    def fresh(self, prefix: str) -> str:
        """A name not given out or reserved before: prefix0, prefix1, ..."""
        while True:
            n = self._counts.get(prefix, 0)
            self._counts[prefix] = n + 1
            if f"{prefix}{n}" not in self._reserved:
                return f"{prefix}{n}"

    def reserve(self, names) -> None:
        """Keep `names` (spelled out by the caller, as a function's parameters) from fresh."""
        self._reserved.update(names)

    def share_names(self, other: Emitter) -> None:
        """Allocate names from `other`'s allocator (functions of one module share it)."""
        self._counts, self._reserved = other._counts, other._reserved

    @contextlib.contextmanager
    def indent(self):
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1


class EmitContext:
    """What every step emitter's context offers, on either backend: lines written into the
    function being generated (`self.em`, an Emitter) and the step's node (`self.node`)."""

    def line(self, text: str) -> None:
        self.em.line(text)

    def fresh(self, prefix: str) -> str:
        return self.em.fresh(prefix)

    def indent(self):
        return self.em.indent()

    def input_var(self, i: int):
        return self.node.inputs[i]

    def constant_value(self, i: int):
        """The data of input `i` where it is a graph constant, else None."""
        var = self.node.inputs[i]
        return var.data if isinstance(var, Constant) else None


def any_of(conditions) -> str:
    """One boolean expression true where any of `conditions` is, each evaluated (`|`: numba
    makes blocks of the short-circuiting `or`)."""
    conditions = list(conditions)
    return conditions[0] if len(conditions) == 1 else " | ".join(f"({c})" for c in conditions)


def all_of(conditions) -> str:
    """One boolean expression true where all of `conditions` are, each evaluated (`&`)."""
    conditions = list(conditions)
    return conditions[0] if len(conditions) == 1 else " & ".join(f"({c})" for c in conditions)


def tuple_expr(items) -> str:
    """A Python tuple expression of the expressions `items` (`(a, b, )`, `()`)."""
    return "(" + "".join(f"{d}, " for d in items) + ")"


def np_dtype(dtype: str) -> str:
    """The expression naming numpy dtype `dtype` in generated code."""
    return "np.bool_" if dtype == "bool" else f"np.{dtype}"


def _float_text(value: float) -> str:
    if math.isnan(value):
        return "math.nan"
    if math.isinf(value):
        return f"{'-' if value < 0 else ''}math.inf"
    return repr(value)


def literal(value, dtype: str) -> str:
    """A typed scalar literal in generated code."""
    value = np.asarray(value).item()
    if dtype == "bool":
        return "True" if value else "False"
    if isinstance(value, complex):
        return f"{np_dtype(dtype)}(complex({_float_text(value.real)}, " \
               f"{_float_text(value.imag)}))"
    if isinstance(value, float):
        if math.isnan(value):
            return f"{np_dtype(dtype)}(math.nan)"
        if math.isinf(value):
            return f"{np_dtype(dtype)}({'-' if value < 0 else ''}math.inf)"
    return f"{np_dtype(dtype)}({value!r})"


def cast_expr(expr: str, dtype: str) -> str:
    """`expr` converted to `dtype` in generated code."""
    if dtype == "bool":
        return f"({expr} != 0)"
    return f"{np_dtype(dtype)}({expr})"
