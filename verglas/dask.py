"""Functions on a dask cluster: blockwise over dask arrays, and what each worker compiled.

A Function pickles with its optimized graph and Program, never its machine code: a worker
process that unpickles it builds its runner (compiles it, or loads it from the cache directory
the workers share, `VERGLAS_CACHE_DIR`) once, however many tasks carry it, since a process keeps
the Functions it unpickled by cache key (`verglas.function`). So `client.submit(f, x)` works as
it is, and `map_blocks(f, *arrays)` maps a Function over the blocks of dask arrays.

Worker processes that each run one task at a time on a machine's cores should not also run
row loops on threads: start them with `VERGLAS_THREADS=0` (and one BLAS thread, which dask's
nanny sets by default), e.g. `LocalCluster(threads_per_worker=1, env={"VERGLAS_THREADS": "0"})`.
"""

from __future__ import annotations

import itertools
import operator
import string
import uuid

import dask.array as da
import numpy as np
from dask.array.core import unify_chunks
from dask.base import tokenize
from dask.highlevelgraph import HighLevelGraph

from verglas import function
from verglas.function import Function
from verglas.ops.basic import Shape, ShapeI
from verglas.schedule.shapes import ShapeTable

__all__ = ["map_blocks", "runner_builds"]


def runner_builds() -> dict[str, int]:
    """Runners this process built (compiled or loaded from the cache), per Function cache
    key: `client.run(runner_builds)` reads it on every worker."""
    return dict(function.RUNNER_BUILDS)


def map_blocks(f: Function, *args):
    """Apply `f` to every block of the dask arrays among `args`; other arguments go whole to
    every block. Returns a dask array per output of `f` (a tuple where `f` returns a list).

    The dask arrays are aligned like numpy broadcasting (trailing axes together) and their
    chunks unified. Output chunks and dtypes come from `f` itself: each output axis follows
    the one chunked axis its length depends on, as the Program's shape logic says (no probe
    call), and its chunk lengths are evaluated from the blocks' shapes. An output that does
    not follow every chunked axis (a reduction across blocks, say) is a ValueError.

    Examples
    --------
    >>> import dask.array as da, numpy as np, verglas as vg, verglas.dask
    >>> x = vg.tensor("x", shape=(None, 3), dtype="float64")
    >>> f = vg.compile([x], [vg.exp(x), vg.sum(x, axis=1)])
    >>> e, s = verglas.dask.map_blocks(f, da.ones((10, 3), chunks=(4, 3)))
    >>> e.chunks, s.chunks
    (((4, 4, 2), (3,)), ((4, 4, 2),))
    """
    if not isinstance(f, Function):
        raise TypeError(f"map_blocks: expected a verglas Function, not {type(f).__name__}")
    if len(args) != len(f.input_names):
        n = len(f.input_names)
        raise TypeError(f"map_blocks: the Function takes {n} input{'s' if n != 1 else ''} "
                        f"({', '.join(f.input_names)}), got {len(args)}")
    mapped = [k for k, a in enumerate(args) if isinstance(a, da.Array)]
    if not mapped:
        raise TypeError("map_blocks: no dask array among the arguments (call the Function)")
    types = [v.type for v in f.graph.inputs]
    ndim = max(args[k].ndim for k in mapped)
    letters = string.ascii_lowercase[:ndim]  # the grid's axes, trailing axes aligned
    pairs = []
    for k in mapped:
        if args[k].ndim != types[k].ndim:
            raise TypeError(f"map_blocks: input {k} ({f.input_names[k]!r}) has ndim "
                            f"{args[k].ndim}, the Function wants {types[k].ndim}")
        pairs += [args[k], letters[ndim - args[k].ndim:]]
    chunkss, arrays = unify_chunks(*pairs)
    grid = [chunkss[g] for g in letters]
    operands = list(args)
    for k, array in zip(mapped, arrays):
        _check_static(f, k, types[k].shape, array.chunks)
        operands[k] = array

    def block_shapes(block) -> list[tuple]:
        """The shape of each operand in grid block `block`."""
        return [tuple(c[block[ndim - op.ndim + a]] if len(c) > 1 else c[0]
                      for a, c in enumerate(op.chunks)) if k in mapped else np.shape(op)
                for k, op in enumerate(operands)]

    outputs = _output_layouts(f, mapped, operands, grid, block_shapes)
    blocks = list(itertools.product(*(range(len(c)) for c in grid)))
    token = tokenize(f.cache_key or uuid.uuid4().hex, f.single, *args)
    base = f"verglas-blocks-{token}"
    tasks: dict = {}
    refs = []
    for k, op in enumerate(operands):  # whole arrays: one key each, sent once to a worker
        whole = k not in mapped and np.ndim(op) > 0
        if whole:  # (a list in a dask graph is a list of tasks: an array instead)
            tasks[f"{base}-input{k}"] = np.asarray(op) if isinstance(op, (list, tuple)) else op
        refs.append(f"{base}-input{k}" if whole else op)
    for block in blocks:
        tasks[(base, *block)] = (_call, f, *(
            (ref.name, *(block[ndim - ref.ndim + a] if n > 1 else 0
                         for a, n in enumerate(ref.numblocks)))
            if k in mapped else ref for k, ref in enumerate(refs)))
    graph = HighLevelGraph.from_collections(base, tasks, dependencies=arrays)
    results = da.Array(graph, base, chunks=grid, meta=np.empty((0,) * ndim, object))
    out = []
    for k, (dtype, axes, chunks) in enumerate(outputs):
        name = f"verglas-output{k}-{token}"
        tasks = {(name, *(block[g] if g is not None else 0 for g in axes)):
                 (operator.getitem, (base, *block), k) for block in blocks}
        graph = HighLevelGraph.from_collections(name, tasks, dependencies=[results])
        out.append(da.Array(graph, name, chunks=chunks, meta=np.empty((0,) * len(axes), dtype)))
    return out[0] if f.single else tuple(out)


def _call(f: Function, *args) -> tuple:
    """One block's outputs, as a tuple."""
    result = f(*args)
    return (result,) if f.single else tuple(result)


def _check_static(f: Function, k: int, static: tuple, chunks: tuple) -> None:
    """Blocks of input `k` fit its static shape."""
    for axis, (want, lengths) in enumerate(zip(static, chunks)):
        if want is not None and any(n != want for n in lengths):
            raise ValueError(f"map_blocks: input {k} ({f.input_names[k]!r}) has blocks of "
                             f"length {sorted(set(lengths))} along axis {axis}, where the "
                             f"Function wants {want}: rechunk it")


def _output_layouts(f: Function, mapped, operands, grid, block_shapes) -> list[tuple]:
    """Per output of `f`: its dtype, the grid axis each of its axes follows (None: one chunk)
    and its chunks."""
    table = ShapeTable(f.graph, list(f.graph.outputs))
    ndim = len(grid)
    # (input position, axis) -> the grid axis it lies along, where that axis has many blocks
    along = {(k, a): ndim - operands[k].ndim + a for k in mapped
             for a in range(operands[k].ndim) if len(grid[ndim - operands[k].ndim + a]) > 1}
    chunked = sorted(set(along.values()))
    shapes_of: dict = {}

    def shapes(block) -> list:
        key = tuple(block_shapes(block))
        if key not in shapes_of:
            shapes_of[key] = table.evaluate(list(key))
        return shapes_of[key]

    first = (0,) * ndim
    layouts = []
    for k, var in enumerate(f.graph.outputs):
        label = f"map_blocks: output {k}"
        if shapes(first)[k] is None:
            raise ValueError(f"{label}: its shape depends on the input values")
        axes = []
        for j, dim in enumerate(table.dims_of(k)):
            follows = {along[d] for d in _input_axes(dim, table.graph.inputs) if d in along}
            if len(follows) > 1:
                raise ValueError(f"{label}: axis {j} depends on several chunked axes "
                                 f"{sorted(follows)}")
            axes.append(follows.pop() if follows else None)
        for g in chunked:
            if axes.count(g) != 1:
                raise ValueError(f"{label} does not follow the blocks along axis {g} (its shape "
                                 f"is not blockwise: a reduction across blocks?); rechunk "
                                 f"that axis to one block")
        chunks = tuple(
            (shapes(first)[k][j],) if g is None else
            tuple(shapes(tuple(i if h == g else 0 for h in range(ndim)))[k][j]
                  for i in range(len(grid[g])))
            for j, g in enumerate(axes))
        layouts.append((np.dtype(var.type.dtype), tuple(axes), chunks))
    return layouts


def _input_axes(dim, inputs) -> set[tuple[int, int]]:
    """The (input position, axis) pairs the symbolic length `dim` is computed from."""
    position = {v: k for k, v in enumerate(inputs)}
    found, seen, stack = set(), set(), [dim]
    while stack:
        var = stack.pop()
        node = var.owner
        if node is None or var in seen:
            continue
        seen.add(var)
        source = node.inputs[0] if node.inputs else None
        if isinstance(node.op, ShapeI) and source in position:
            found.add((position[source], node.op.i))
        elif isinstance(node.op, Shape) and source in position:
            found.update((position[source], a) for a in range(source.ndim))
        else:
            stack.extend(node.inputs)
    return found
