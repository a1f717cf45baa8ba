"""Helpers for the rule tests: rewrite a graph with one phase set, count its nodes, and
compare results before and after with the reference executor (NaNs equal)."""

from __future__ import annotations

from collections import Counter

import numpy as np

from verglas.graph import FunctionGraph, freeze
from verglas.ops.elemwise import Elemwise
from verglas.graph.reference import ReferenceRunner
from verglas.rewrite import get_mode, rewrite_graph

NO_FUSION = get_mode("fast_run").excluding("fusion", "inplace", "scan",
                                           "optimize_inner_graphs")


def rewritten(inputs, outputs, mode=NO_FUSION) -> FunctionGraph:
    """A rewritten copy of the graph from `inputs` to `outputs`."""
    outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
    fg = FunctionGraph(inputs, outputs, clone=True)
    return rewrite_graph(fg, mode, strict=True)


def op_names(fg) -> Counter:
    """Counter of node kinds: the scalar op name for Elemwise, else the op class name."""
    out = Counter()
    for node in fg.apply_nodes:
        op = node.op
        out[op.scalar_op.name if type(op) is Elemwise else type(op).__name__] += 1
    return out


def run_graph(inputs, outputs, args):
    """Evaluate the (unrewritten) graph with the reference executor."""
    outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
    return ReferenceRunner(freeze(inputs, outputs))(list(args))


def run_fg(fg, args):
    """Evaluate a rewritten FunctionGraph with the reference executor."""
    return ReferenceRunner(fg.freeze())(list(args))


def assert_same(before, after, rtol=1e-6, atol=1e-12):
    """Same dtypes, shapes and values (NaN equal to NaN, infinities exact)."""
    assert len(before) == len(after)
    for b, a in zip(before, after):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype, (a.dtype, b.dtype)
        assert a.shape == b.shape, (a.shape, b.shape)
        if a.dtype.kind in "fc":
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
        else:
            np.testing.assert_array_equal(a, b)


def check_preserved(inputs, outputs, args, mode=NO_FUSION, **tol):
    """Rewrite, evaluate before and after on `args`, assert equal; return the rewritten graph."""
    fg = rewritten(inputs, outputs, mode)
    assert_same(run_graph(inputs, outputs, args), run_fg(fg, args), **tol)
    return fg
