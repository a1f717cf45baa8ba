"""A first look at verglas's IR: freeze two graphs built from different variables.

Run with `python -m verglas.demo`. It builds the seed example sin(a) * b**2 and sin(c) * d**2
with a few small scalar ops, freezes both into the interned IR, shows that they are the same
graph (equal, same hash, same objects), pickles one, and prints graphs with dprint, including
an inner-graph op used twice whose graph prints once.
"""

from __future__ import annotations

import math
import pickle

from verglas.graph import (Apply, FrozenFunctionGraph, FunctionGraph, Op, ScalarType, dprint,
                           freeze)

f64 = ScalarType("float64")


class Scalar(Op):
    """A scalar op applying a `math` function by name."""

    __props__ = ("name", "nin")

    def __init__(self, name: str, nin: int):
        self.name, self.nin = name, nin

    def make_node(self, *inputs):
        if len(inputs) != self.nin or any(v.type != f64 for v in inputs):
            raise TypeError(f"{self.name}: expected {self.nin} float64 scalars, got "
                            f"{[str(v.type) for v in inputs]}")
        return Apply(self, inputs, [f64])

    def perform(self, node, inputs, outputs):
        fn = {"sin": math.sin, "mul": lambda a, b: a * b, "sqr": lambda a: a * a}[self.name]
        outputs[0][0] = fn(*inputs)

    def __str__(self):
        return self.name


sin, mul, sqr = Scalar("sin", 1), Scalar("mul", 2), Scalar("sqr", 1)


class Fused(Op):
    """A toy Composite: one node that computes a frozen scalar graph."""

    __props__ = ("fgraph",)

    def __init__(self, fgraph: FrozenFunctionGraph):
        self.fgraph = fgraph

    def make_node(self, *inputs):
        return Apply(self, inputs, [o.type for o in self.fgraph.outputs])

    def __str__(self):
        return "Fused{" + ", ".join(str(n.op) for n in self.fgraph.toposort()) + "}"


def main() -> None:
    """Build, freeze, compare, pickle and print the seed example."""
    a, b, c, d = (f64.make_variable(n) for n in "abcd")
    eq1 = mul(sin(a), sqr(b))
    eq2 = mul(sin(c), sqr(d))

    g1, g2 = freeze([a, b], [eq1]), freeze([c, d], [eq2])
    print("sin(a) * b**2 and sin(c) * d**2, frozen:")
    print(f"  equal: {g1 == g2}, same hash: {hash(g1) == hash(g2)}, "
          f"same output object: {g1.outputs[0] is g2.outputs[0]}")
    g3 = pickle.loads(pickle.dumps(g1))
    print(f"  pickled and loaded: equal {g3 == g1}, same output object "
          f"{g3.outputs[0] is g1.outputs[0]}")
    print(f"  fingerprint: {g1.fingerprint()[:16]}...\n")
    dprint(g1)

    # Two fused nodes with equal ops: the inner graph prints once.
    fused1, fused2 = Fused(g1), Fused(g2)
    print(f"\nFused(g1) == Fused(g2): {fused1 == fused2}\n")
    outer = FunctionGraph([a, b, c, d], [fused1(a, b), fused2(c, d)])
    dprint(outer)


if __name__ == "__main__":
    main()
