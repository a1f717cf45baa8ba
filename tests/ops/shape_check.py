"""Checking an op's `infer_shape` against the shapes its `perform` produces."""

from __future__ import annotations

import verglas as vg
from verglas.ops.basic import shape_i


def check_infer_shape(fn, arrays, static_shapes=None):
    """Build `fn` on inputs typed like `arrays`; its output node's infer_shape must evaluate to
    the shape of the computed output."""
    if static_shapes is None:
        static_shapes = [(None,) * a.ndim for a in arrays]
    inputs = [vg.tensor(f"x{k}", shape=s, dtype=a.dtype)
              for k, (a, s) in enumerate(zip(arrays, static_shapes))]
    out = fn(*inputs)
    node = out.owner
    in_shapes = [tuple(shape_i(i, k) for k in range(i.ndim)) for i in node.inputs]
    dims = node.op.infer_shape(None, node, in_shapes)[out.index]
    assert len(dims) == out.ndim
    for d in dims:
        assert d.ndim == 0 and d.dtype == "int64", d.type
    value = vg.compile(inputs, out, mode="reference")(*arrays)
    if not dims:
        return value
    got = vg.compile(inputs, list(dims), mode="reference")(*arrays)
    assert tuple(int(g) for g in got) == value.shape, (tuple(int(g) for g in got), value.shape)
    return value
