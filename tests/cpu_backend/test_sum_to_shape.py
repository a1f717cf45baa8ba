"""SumToShape (the gradient of numpy broadcasting) on the CPU backend against the reference:
run-time length-1 dims summed away, the usual equal-shape copy, bad target shapes."""

from __future__ import annotations

import pytest

import verglas as vg
from tests.cpu_backend.utils import compare_backend, rng


@pytest.fixture(scope="module")
def graph():
    x = vg.tensor("x", shape=(None, None), dtype="float64")
    y = vg.tensor("y", shape=(None, None), dtype="float64")
    cost = vg.sum(vg.sin(x + y) * y)
    return [x, y], vg.grad(cost, [x, y])


@pytest.mark.parametrize("xs,ys", [((4, 3), (4, 3)), ((1, 3), (4, 3)), ((4, 1), (1, 3)),
                                   ((1, 1), (5, 2)), ((0, 3), (1, 3)), ((2, 3), (1, 1))])
def test_gradient_of_broadcasting(graph, xs, ys):
    inputs, outputs = graph
    g = rng(sum(xs) + 10 * sum(ys))
    compare_backend(inputs, outputs, [g.normal(size=xs), g.normal(size=ys)])


def test_strided_gradient_inputs(graph):
    inputs, outputs = graph
    g = rng(3)
    x = g.normal(size=(6, 8))[::-2, ::2]
    compare_backend(inputs, outputs, [x, g.normal(size=(1, 4))])
