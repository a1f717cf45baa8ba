"""Shape rewrites: shapes computed from input shapes, and nodes that provably change no shape
removed.

Each axis of a variable gets a *dimension*: an int when static, else a key naming the most
upstream variable axis known to have the same length, ("of", var, axis). Dimensions flow
through Elemwise (the non-broadcast inputs share theirs), DimShuffle, reductions, Alloc,
Reshape and SumToShape; any other op starts a new dimension. Two axes with the same dimension
have the same length at run time, so `x.shape[i]` becomes a constant or the shape of a graph
input, and SumToShape / Alloc / Reshape / second to a shape they already have disappear. The
dimensions of a variable never change (rewrites replace values by equal values), so they are
computed once per variable and kept in a ShapeDims feature on the graph.
"""

from __future__ import annotations

from verglas.graph import Constant, Feature, TensorType, Variable
from verglas.ops import scalar as s
from verglas.ops.scalar import Eq, Switch
from verglas.ops.basic import DimShuffle, MakeVector, Shape, ShapeI, constant
from verglas.ops.elemwise import Elemwise, SumToShape, elemwise
from verglas.ops.indexing import IncSubtensor, Subtensor
from verglas.ops.linalg import MatMul
from verglas.ops.math import cast
from verglas.ops.reduce import Reduce, Sum
from verglas.ops.shape import Alloc, Reshape
from verglas.rewrite.registry import phase_rule
from verglas.rewrite.utils import first, same_as, scalar_constant

__all__ = ["ShapeDims", "dims_of", "provably_equal", "scalar_dim", "shape_to_vector",
           "shape_subtensor",
           "make_vector_subtensor", "shape_i_from_dims", "sum_to_shape_useless",
           "alloc_same_shape", "reshape_same_shape", "second_same_shape", "where_same_shape",
           "second_shape_given", "inc_subtensor_everything"]

_INT = "int64"
TAGS = ("fast_run", "fast_compile")


class ShapeDims(Feature):
    """Per-variable dimensions (see the module doc), computed on demand and kept, and which
    dimensions are known equal (a union-find: matmul's contracted axes are one length)."""

    def __init__(self):
        self.dims: dict = {}
        self.parent: dict = {}

    def find(self, dim):
        """The representative of `dim`'s class of equal dimensions."""
        parent = self.parent
        root = dim
        while root in parent:
            root = parent[root]
        while dim in parent and parent[dim] is not root:  # path compression
            parent[dim], dim = root, parent[dim]
        return root

    def union(self, a, b) -> None:
        """Record that dimensions `a` and `b` are equal at run time."""
        a, b = self.find(a), self.find(b)
        if a == b or _is_val(a) or _is_val(b) or (isinstance(a, int) and isinstance(b, int)):
            return
        if isinstance(b, int) or (not isinstance(a, int) and _of_input(b)):
            a, b = b, a  # keep ints, then graph inputs, as representatives
        self.parent[b] = a


def _of_input(dim) -> bool:
    """Whether `dim` is an axis of a graph input."""
    return dim[0] == "of" and dim[1].owner is None


def _feature(fgraph) -> ShapeDims:
    for feature in fgraph.features:
        if type(feature) is ShapeDims:
            return feature
    feature = ShapeDims()
    fgraph.attach_feature(feature)
    for out in fgraph.outputs:  # every node once, so that all equalities are recorded
        _dims(out, feature)
    return feature


def dims_of(fgraph, var: Variable) -> tuple:
    """The dimension of each axis of `var`: ints (static) or ("of", variable, axis) keys."""
    feature = _feature(fgraph)
    return tuple(feature.find(d) for d in _dims(var, feature))


def _dims(var: Variable, feature: ShapeDims) -> tuple:
    memo = feature.dims
    found = memo.get(var)
    if found is not None:
        return found
    stack = [var]
    while stack:  # iterative post-order over the ancestors not known yet (deep chains)
        top = stack[-1]
        if top in memo:
            stack.pop()
            continue
        missing = [] if top.owner is None else [i for i in _dim_inputs(top) if i not in memo]
        if missing:
            stack.extend(missing)
            continue
        stack.pop()
        memo[top] = _compute(top, memo, feature)
    return memo[var]


def _dim_inputs(var: Variable) -> list:
    """The variables whose dimensions `var`'s dimensions are computed from."""
    op = var.owner.op
    inputs = var.owner.inputs
    if isinstance(op, Alloc):
        return [d.owner.inputs[0] for d in inputs[1:] if _is_shape_i(d)]
    if isinstance(op, (Reshape, SumToShape)):
        return _vector_sources(inputs[1])
    return [i for i in inputs if isinstance(i.type, TensorType)]


def _is_shape_i(var) -> bool:
    return var.owner is not None and type(var.owner.op) is ShapeI


def _vector_sources(shp) -> list:
    owner = shp.owner
    if owner is None:
        return []
    if type(owner.op) is Shape:
        return [owner.inputs[0]]
    if type(owner.op) is MakeVector:
        return [d.owner.inputs[0] for d in owner.inputs if _is_shape_i(d)]
    return []


def _scalar_dim(v: Variable, memo) -> object:
    value = scalar_constant(v) if v.ndim == 0 else None
    if value is not None:
        return int(value)
    if _is_shape_i(v):
        return memo[v.owner.inputs[0]][v.owner.op.i]
    return ("val", v)


def scalar_dim(fgraph, v: Variable) -> object:
    """The dimension a 0-d int variable stands for (an int, a shape key, or ("val", v))."""
    feature = _feature(fgraph)
    if _is_shape_i(v):
        _dims(v.owner.inputs[0], feature)
    return feature.find(_scalar_dim(v, feature.dims))


def _vector_dims(shp: Variable, n: int, memo) -> list:
    """The dimensions a shape vector of length n holds (("val", shp, k) where unknown)."""
    owner = shp.owner
    if isinstance(shp, Constant):
        return [int(v) for v in shp.data]
    if owner is not None and type(owner.op) is Shape:
        return list(memo[owner.inputs[0]])
    if owner is not None and type(owner.op) is MakeVector:
        return [_scalar_dim(d, memo) for d in owner.inputs]
    return [("val", shp, k) for k in range(n)]


def _target_dims(fgraph, shp: Variable, n: int) -> list:
    """The dimensions held by shape vector `shp` (of length n), as representatives."""
    feature = _feature(fgraph)
    for src in _vector_sources(shp):
        _dims(src, feature)
    return [feature.find(d) for d in _vector_dims(shp, n, feature.dims)]


def _compute(var: Variable, memo, feature: ShapeDims) -> tuple:
    static = var.type.shape
    owner = var.owner
    fresh = tuple(d if d is not None else ("of", var, a) for a, d in enumerate(static))
    if owner is None:
        return fresh
    op, inputs = owner.op, owner.inputs
    if isinstance(op, Elemwise):
        out = []
        for a, d in enumerate(static):
            if d is not None:
                out.append(d)
                continue
            found = list(dict.fromkeys(feature.find(memo[i][a]) for i in inputs
                                       if i.type.shape[a] != 1))
            if len(found) == 1:
                out.append(found[0])
            elif found and not any(_is_val(d) for d in found):
                out.append(("bcast", tuple(found)))  # numpy's broadcast of those lengths
            else:
                out.append(fresh[a])
        return tuple(out)
    if isinstance(op, DimShuffle):
        src = memo[inputs[0]]
        return tuple(1 if e == "x" else src[e] for e in op.new_order)
    if isinstance(op, Reduce):
        src = memo[inputs[0]]
        if op.keepdims:
            return tuple(1 if a in op.axis else d for a, d in enumerate(src))
        return tuple(d for a, d in enumerate(src) if a not in op.axis)
    if isinstance(op, Alloc):
        got = [_scalar_dim(d, memo) for d in inputs[1:]]
    elif isinstance(op, (Reshape, SumToShape)):
        got = _vector_dims(inputs[1], var.ndim, memo)
        if isinstance(op, Reshape):  # the axis of -1: a length of its own
            got = [("val", None) if g == -1 else g for g in got]
    else:
        if isinstance(op, MatMul) and inputs[0].ndim and inputs[1].ndim:
            a, b = memo[inputs[0]], memo[inputs[1]]
            feature.union(a[-1], b[-2] if len(b) > 1 else b[0])
        got = _inferred(var, memo)
    return tuple(st if st is not None else (g if not _is_val(g) else fresh[a])
                 for a, (st, g) in enumerate(zip(static, got)))


def _inferred(var: Variable, memo) -> list:
    """Dimensions from the op's infer_shape, run on placeholder input dimensions: an output
    axis that infer_shape answers with an input's axis shares that axis' dimension."""
    node = var.owner
    unknown = [("val", None)] * var.ndim
    placeholders, shapes = {}, []
    for i in node.inputs:
        if not isinstance(i.type, TensorType):
            shapes.append(None)
            continue
        entry = []
        for d in memo[i]:
            p = _PLACEHOLDER.make_variable()
            placeholders[p] = d
            entry.append(p)
        shapes.append(tuple(entry))
    try:
        result = node.op.infer_shape(None, node, shapes)[var.index]
    except Exception:  # noqa: BLE001 - no shape rule, or one needing more: unknown dims
        return unknown
    out = []
    for entry in result:
        if entry in placeholders:
            out.append(placeholders[entry])
        elif isinstance(entry, Constant) and entry.ndim == 0:
            out.append(int(entry.data))
        elif any(entry is i for i in node.inputs) and entry.ndim == 0:
            out.append(_scalar_dim(entry, memo))  # a length given as a value: a loop's count
        else:
            out.append(("val", None))
    return out


_PLACEHOLDER = TensorType("int64", ())


def _is_val(dim) -> bool:
    return isinstance(dim, tuple) and dim[0] == "val"


def _length(fgraph, x, axis: int):
    """A 0-d int64 variable for the length of `x`'s axis (None: none better than reading
    it). A broadcast length is computed from its parts only where that frees `x`."""
    dim = dims_of(fgraph, x)[axis]
    if isinstance(dim, tuple) and dim[0] == "bcast" and not _read_for_shape_only(fgraph, x):
        return ShapeI(axis)(x)  # x is computed anyway: its length is known where it is
    return _dim_variable(fgraph, dim)


def _dim_variable(fgraph, dim):
    """A 0-d int64 variable for `dim` (None for unknown values and for variables the graph
    no longer holds: reading their shape would bring them back). A broadcast of lengths is
    computed from them as Elemwise.infer_shape does, so reading an elementwise result's
    length does not keep the inputs' producers alive (a matmul a gradient only needs the
    shape of)."""
    if isinstance(dim, int):
        return constant(dim, _INT)
    if dim[0] == "of" and dim[1] in fgraph.variables:
        _, var, axis = dim
        return ShapeI(axis)(var)
    if dim[0] == "bcast":
        parts = [_dim_variable(fgraph, d) for d in dim[1]]
        if any(p is None for p in parts):
            return None
        length = parts[0]
        for other in parts[1:]:
            length = elemwise(Switch(), elemwise(Eq(), other, 1), length, other)
        return length
    return None


_rule = phase_rule("shape", TAGS)


@_rule(Shape)
def shape_to_vector(fgraph, node):
    """shape(x) -> a constant (static shape) or make_vector(shape_i(x, 0), ...)."""
    (x,) = node.inputs
    entries = [_length(fgraph, x, a) for a in range(x.ndim)]
    if any(e is None for e in entries):
        return None
    if all(isinstance(e, Constant) for e in entries):
        return [constant([int(e.data) for e in entries], _INT)]
    return [MakeVector(_INT)(*entries)] if entries else None


def _int_index(node):
    """The constant int of a Subtensor `v[i]` on a vector, else None."""
    if node.op.idx_list != ("int",):
        return None
    value = scalar_constant(node.inputs[1])
    return None if value is None else int(value)


@_rule(Subtensor)
def shape_subtensor(fgraph, node):
    """shape(x)[i] -> shape_i(x, i) (a constant when static)."""
    vec = node.inputs[0]
    i = _int_index(node)
    if i is None or vec.owner is None or type(vec.owner.op) is not Shape:
        return None
    x = vec.owner.inputs[0]
    if not -x.ndim <= i < x.ndim:
        return None
    new = _length(fgraph, x, i % x.ndim)
    return None if new is None else first(same_as(node.outputs[0], new))


@_rule(Subtensor)
def make_vector_subtensor(fgraph, node):
    """make_vector(a, b, ...)[i] -> the i-th entry."""
    vec = node.inputs[0]
    i = _int_index(node)
    if i is None or vec.owner is None or type(vec.owner.op) is not MakeVector:
        return None
    entries = vec.owner.inputs
    if not -len(entries) <= i < len(entries):
        return None
    entry = entries[i]
    if entry.dtype != node.outputs[0].dtype:
        entry = cast(entry, node.outputs[0].dtype)
    return first(same_as(node.outputs[0], entry))


@_rule(ShapeI)
def shape_i_from_dims(fgraph, node):
    """shape_i(x, i) -> a constant, or shape_i of the upstream variable with that length."""
    (x,) = node.inputs
    dim = dims_of(fgraph, x)[node.op.i]
    if isinstance(dim, tuple) and dim[0] == "of" and dim[1] is x:
        return None
    if isinstance(dim, tuple) and dim[0] == "bcast" and not _read_for_shape_only(fgraph, x) \
            and not _used_as_a_value(fgraph, node.outputs[0]):
        return None  # x is computed anyway: its length is known where it is (no new check)
    new = _dim_variable(fgraph, dim)
    return None if new is None else first(same_as(node.outputs[0], new))


def _used_as_a_value(fgraph, length) -> bool:
    """Whether only arithmetic reads `length` (a mean's count): computed from the inputs'
    lengths, it no longer waits for the array, which would split the rows of a layernorm of
    a sum between its two reductions. (A length that shapes another array stays read where
    it is: the code generator proves those equal.)"""
    clients = fgraph.clients.get(length, ())
    return bool(clients) and all(c != "output" and isinstance(c.op, Elemwise)
                                 for c, _ in clients)


def _read_for_shape_only(fgraph, x) -> bool:
    """Whether every client of `x` reads only its shape (computing the length another way
    then frees it: a forward value a gradient kept alive for its length alone)."""
    return all(client != "output" and client.op.reads_shape_only
               for client, _ in fgraph.clients.get(x, ()))


def provably_equal(a, b) -> bool:
    """Whether dimensions `a` and `b` (from `dims_of`) are one length at run time."""
    return a == b and not _is_val(a)


@_rule(SumToShape)
def sum_to_shape_useless(fgraph, node):
    """SumToShape(g, shape) -> g where g provably has that shape; a static Sum where the
    only axes that differ are known to be 1 in the target."""
    g, shp = node.inputs
    gdims = dims_of(fgraph, g)
    target = _target_dims(fgraph, shp, g.ndim)
    axes = []
    for a, (gd, td) in enumerate(zip(gdims, target)):
        if provably_equal(gd, td):
            continue
        if td == 1:
            if gd == 1:
                continue
            axes.append(a)
            continue
        return None
    out = node.outputs[0]
    new = Sum(tuple(axes), True)(g) if axes else g
    if new.dtype != out.dtype:
        new = cast(new, out.dtype)
    return first(same_as(out, new))


@_rule(Alloc)
def alloc_same_shape(fgraph, node):
    """broadcast_to(x, dims) -> x when the dims are provably x's."""
    x, *dims = node.inputs
    if x.ndim != len(dims):
        return None
    xdims = dims_of(fgraph, x)
    if all(provably_equal(xd, scalar_dim(fgraph, d)) for xd, d in zip(xdims, dims)):
        return first(same_as(node.outputs[0], x))
    return None


@_rule(Reshape)
def reshape_same_shape(fgraph, node):
    """reshape(x, shp) -> x when shp provably is x's shape."""
    x, shp = node.inputs
    if x.ndim != node.op.ndim:
        return None
    xdims = dims_of(fgraph, x)
    target = _target_dims(fgraph, shp, x.ndim)
    if all(provably_equal(a, b) for a, b in zip(xdims, target)):
        return first(same_as(node.outputs[0], x))
    return None


@_rule(Elemwise, scalar_tracks=(s.Second,))
def second_same_shape(fgraph, node):
    """second(x, y) -> y when y provably has the broadcast shape already."""
    _, y = node.inputs
    out = node.outputs[0]
    if y.dtype != out.dtype:
        return None
    if all(provably_equal(a, b) for a, b in zip(dims_of(fgraph, y), dims_of(fgraph, out))):
        return first(same_as(out, y))
    return None


@_rule(Elemwise, scalar_tracks=(s.Switch,))
def where_same_shape(fgraph, node):
    """where(c, a, a) -> a when a provably has the broadcast shape already."""
    _, a, b = node.inputs
    out = node.outputs[0]
    if a is not b or a.dtype != out.dtype:
        return None
    if all(provably_equal(p, q) for p, q in zip(dims_of(fgraph, a), dims_of(fgraph, out))):
        return first(same_as(out, a))
    return None


def _same_dims(fgraph, a: Variable, b: Variable) -> bool:
    feature = _feature(fgraph)
    return a.ndim == b.ndim and all(
        provably_equal(feature.find(p), feature.find(q))
        for p, q in zip(dims_of(fgraph, a), dims_of(fgraph, b)))


@_rule(Elemwise)
def second_shape_given(fgraph, node):
    """op(second(x, y), z) -> op(y, z) where z provably has x's shape: the second only
    broadcast y to a shape another operand brings anyway (a gradient's `ones_like(sqr(h)) * h`
    then no longer keeps sqr(h) alive for its shape)."""
    if len(node.inputs) < 2:
        return None
    for k, v in enumerate(node.inputs):
        if not isinstance(getattr(v.owner, "op", None), Elemwise) \
                or not isinstance(v.owner.op.scalar_op, s.Second):
            continue
        x, y = v.owner.inputs
        if y.dtype != v.dtype or y.ndim > x.ndim:
            continue
        if any(j != k and _same_dims(fgraph, z, x) for j, z in enumerate(node.inputs)):
            inputs = list(node.inputs)
            inputs[k] = y
            return first(same_as(node.outputs[0], node.op(*inputs)))
    return None


def _covers_axis(fgraph, entry, values, x, axis: int) -> bool:
    """Whether slice `entry` (with its given components `values`) selects all of x's axis."""
    if not (isinstance(entry, tuple) and entry[0] == "slice"):
        return False
    start, stop, step = (next(values) if given else None for given in entry[1:])
    if start is not None and scalar_constant(start) != 0:
        return False
    if step is not None and scalar_constant(step) != 1:
        return False
    if stop is None:
        return True
    feature = _feature(fgraph)
    return provably_equal(feature.find(scalar_dim(fgraph, stop)),
                           feature.find(dims_of(fgraph, x)[axis]))


@_rule(IncSubtensor)
def inc_subtensor_everything(fgraph, node):
    """inc_subtensor(x[0:len], v) -> x + v, set_subtensor likewise -> v broadcast to x's shape,
    where the slices provably cover all of x and v provably broadcasts to it: a gradient's
    zeros-then-increment becomes one elementwise pass, fused with its neighbours."""
    x, v, *values = node.inputs
    op = node.op
    it = iter(values)
    if len(op.idx_list) > x.ndim or not all(
            _covers_axis(fgraph, e, it, x, a) for a, e in enumerate(op.idx_list)):
        return None
    if v.ndim > x.ndim:
        return None
    feature = _feature(fgraph)
    xdims = dims_of(fgraph, x)[x.ndim - v.ndim:]
    for static, vd, xd in zip(v.type.shape, dims_of(fgraph, v), xdims):
        if static != 1 and not provably_equal(feature.find(vd), feature.find(xd)):
            return None
    out = node.outputs[0]
    new = elemwise(s.Second(), x, v) if op.set_instead_of_inc else elemwise(s.Add(), x, v)
    if new.dtype != out.dtype:
        new = cast(new, out.dtype)
    return first(same_as(out, new))
