"""Run-time lengths a generated function has proven equal, so that a check already implied by
earlier code is not emitted again.

A check costs numba far more than its comparison: every `if ...: raise` is blocks, an exception
constant and variables for LLVM's SROA to split (measured on mlp_grad's program: its thirteen
broadcast checks cost ~0.4 s of its 2 s cold compile). Most are implied: a gradient's
SumToShape compares dims that the forward pass's allocations and checks already tied together.

Lengths are expressions of the generated code (`b8.shape[1]`, `in2.shape[0]`, `5`), kept in a
union-find. Facts come from what the code guarantees: an allocation's shape, a view's dims, an
inplace result being its input, and each emitted check once it has passed. Buffer names are
bound once in the straight-line code a function's steps emit, so a fact stays true below the
point it was learned.
"""

from __future__ import annotations

import re

import numpy as np

__all__ = ["DimFacts", "tuple_items"]

_INPUT_LENGTH = re.compile(r"in\d+\.shape\[\d+\]")


class DimFacts:
    """A union-find over length expressions of one generated function."""

    def __init__(self, constants: dict | None = None):
        self._parent: dict[str, str] = {}
        self._input_form: dict[str, str] = {}  # root -> a literal or input length it equals
        self._constants = constants if constants is not None else {}  # global name -> value

    def _find(self, x: str) -> str:
        x = _canonical(x)
        value = self._constants.get(x)
        if isinstance(value, np.integer):  # a constant global: its value
            x = str(int(value))
        root = x
        while self._parent.get(root, root) != root:
            root = self._parent[root]
        while x != root:  # path compression
            self._parent[x], x = root, self._parent.get(x, x)
        return root

    def same(self, a: str, b: str) -> bool:
        """Whether lengths `a` and `b` are known equal here."""
        return self._find(a) == self._find(b)

    def learn(self, a: str, b: str) -> None:
        """Record that `a` equals `b` from here on."""
        ra, rb = self._find(a), self._find(b)
        if ra != rb and not (ra.isdigit() and rb.isdigit()):  # (1 = 5: code never reached)
            # a literal stays the representative: `same(x, "1")` then reads one entry
            if rb.isdigit() and not ra.isdigit():
                ra, rb = rb, ra
            self._parent[rb] = ra
            form = self._input_form.pop(rb, None) or _input_form(rb)
            if form is not None and self.input_form(ra) is None:
                self._input_form[ra] = form

    def copy(self) -> DimFacts:
        """Facts that start as these and learn on their own (a loop body's, which need not
        hold after a loop that may run no iteration)."""
        other = DimFacts(self._constants)
        other._parent, other._input_form = dict(self._parent), dict(self._input_form)
        return other

    def input_form(self, x: str) -> str | None:
        """A literal or an input's length (`in0.shape[1]`) known equal to `x`, else None: what
        the top of the function can compute before any step has run."""
        root = self._find(x)
        return self._input_form.get(root) or _input_form(root)

    def unproven(self, pairs) -> list[tuple[str, str]]:
        """The pairs (a, b) not known equal, each once."""
        out = []
        for a, b in pairs:
            if not self.same(a, b) and (a, b) not in out and (b, a) not in out:
                out.append((a, b))
        return out

    def shape_is(self, array: str, dims) -> None:
        """`array`'s shape is the length expressions `dims`."""
        for k, d in enumerate(dims):
            self.learn(f"{array}.shape[{k}]", d)

    def same_shape(self, array: str, other: str, ndim: int) -> None:
        """`array` has the shape of `other` (both of `ndim` dims)."""
        self.shape_is(array, [f"{other}.shape[{k}]" for k in range(ndim)])


def _input_form(atom: str) -> str | None:
    return atom if atom.isdigit() or _INPUT_LENGTH.fullmatch(atom) else None


def _canonical(expr: str) -> str:
    expr = expr.strip()
    while expr.startswith("(") and expr.endswith(")") and _balanced(expr[1:-1]):
        expr = expr[1:-1].strip()
    return expr


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += ch in "([{"
        depth -= ch in ")]}"
        if depth < 0:
            return False
    return depth == 0


def tuple_items(expr: str) -> list[str] | None:
    """The items of a tuple expression `(a, b, )` as written, None for anything else."""
    expr = expr.strip()
    if not (expr.startswith("(") and expr.endswith(")")):
        return None
    items, depth, start = [], 0, 1
    for k, ch in enumerate(expr[1:-1], start=1):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            items.append(expr[start:k].strip())
            start = k + 1
    last = expr[start:-1].strip()
    if last:
        items.append(last)
    if len(items) == 1 and not expr[1:-1].strip().endswith(","):
        return None  # a parenthesized expression, not a tuple
    return items
