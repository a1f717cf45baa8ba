"""Host-side helpers the generated CUDA host code calls: broadcasting, views, launch plans.

They only read shapes and strides (array metadata), never device data, so they run inside a
CUDA graph capture. `L` is the Launcher (runtime.py): `L.xp` is cupy on a GPU, numpy in the
simulator; `L.threads` the block size the kernels were generated for.
"""

from __future__ import annotations

import numpy as np

from verglas.ops.indexing import _build_index

__all__ = ["broadcast_shape", "check_index", "size", "is_flat", "map_views", "scalar", "run_map",
           "copy_into", "run_reduce", "run_arg", "split_view", "join_shape", "move_last", "blocks"]


def blocks(L, n: int, per_block: int | None = None) -> int:
    """Blocks for `n` work items, capped (grid-stride loops cover the rest)."""
    per = per_block or L.threads
    return max(1, min(-(-n // per), L.max_blocks))


def broadcast_shape(op_name: str, *shapes) -> tuple:
    """numpy broadcasting of run-time shapes; ValueError naming the op when impossible."""
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise ValueError(f"{op_name}: input shapes {', '.join(str(tuple(s)) for s in shapes)} "
                         f"cannot be broadcast together") from None


def check_index(op_name: str, shape, index) -> None:
    """IndexError naming the op when a constant index is out of bounds of `shape`."""
    for axis, (k, n) in enumerate(zip(index, shape)):
        if not -n <= k < n:
            raise IndexError(f"{op_name}: index {k} is out of bounds for axis {axis} with "
                             f"size {n}")


def size(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def scalar(value, dtype: str):
    """A host 0-d value as a kernel scalar argument of `dtype` (numpy scalar type)."""
    return np.dtype(dtype).type(np.asarray(value).item())


def is_flat(shape, arrays) -> bool:
    """Whether every array is C-contiguous with exactly `shape` (flat indexing applies)."""
    return all(a.shape == shape and a.flags.c_contiguous for a in arrays)


def map_views(L, shape, arrays) -> list:
    """`arrays` broadcast to `shape` (zero strides) with contiguous dims merged, padded back to
    rank len(shape) with leading length-1 dims (the kernel's rank is fixed when generated)."""
    rank = len(shape)
    views = [a if a.shape == shape else L.xp.broadcast_to(a, shape) for a in arrays]
    dims = [d for d in shape]
    strides = [list(v.strides) for v in views]
    keep = [k for k, d in enumerate(dims) if d != 1]
    dims = [dims[k] for k in keep]
    strides = [[st[k] for k in keep] for st in strides]
    k = len(dims) - 1
    while k > 0:  # merge axis k-1 into k when every array steps over both uniformly
        if all(st[k - 1] == st[k] * dims[k] for st in strides):
            dims[k - 1:k + 1] = [dims[k - 1] * dims[k]]
            for st in strides:
                st[k - 1:k + 1] = [st[k]]
        k -= 1
    pad = rank - len(dims)
    dims = [1] * pad + dims
    return [L.as_strided(v, tuple(dims), tuple([0] * pad + st)) for v, st in zip(views, strides)]


def run_map(L, flat_kernel, kernel, shape, outs, operands, extra) -> None:
    """Launch an elementwise step: the flat kernel when everything is contiguous, else the
    strided one on broadcast, merged views. `operands`: the array operands in parameter order
    with `extra` per operand (None: an array of the loop shape; else a ready argument)."""
    n = size(shape)
    if n == 0:
        return
    arrays = [a for a, e in zip(operands, extra) if e is None]
    if len(shape) == 0 or is_flat(shape, list(outs) + arrays):
        args = [o.reshape(-1) for o in outs]
        args += [a.reshape(-1) if e is None else e for a, e in zip(operands, extra)]
        flat_kernel(blocks(L, n), L.threads, *args, n)
        return
    views = iter(map_views(L, shape, list(outs) + arrays))
    args = [next(views) for _ in outs]
    args += [next(views) if e is None else e for e in extra]
    kernel(blocks(L, n), L.threads, *args, n)


def copy_into(L, kernel, dst, src, op_name: str) -> None:
    """dst[...] = src (broadcast), through the strided copy kernel of dst's rank."""
    if src.shape != dst.shape:
        try:
            src = L.xp.broadcast_to(src, dst.shape)
        except ValueError:
            raise ValueError(f"{op_name}: a value of shape {tuple(src.shape)} cannot be "
                             f"broadcast to shape {tuple(dst.shape)}") from None
    n = size(dst.shape)
    if n == 0:
        return
    if dst.ndim == 0:
        dst, src = dst.reshape(1), src.reshape(1)
    d, s = map_views(L, dst.shape, [dst, src])
    kernel(blocks(L, n), L.threads, d, s, n)


def split_view(L, a, reduced) -> object:
    """A rank-2n view of `a`: the kept axes (reduced ones as length 1), then the reduced axes
    (kept ones as length 1), for reductions whose axes are known only at run time."""
    kept = tuple(1 if r else d for d, r in zip(a.shape, reduced))
    red = tuple(d if r else 1 for d, r in zip(a.shape, reduced))
    return L.as_strided(a, kept + red, tuple(a.strides) * 2)


def move_last(a, axis: int):
    """`a` with `axis` moved last (a view)."""
    order = [d for d in range(a.ndim) if d != axis] + [axis]
    return a.transpose(order)


def _pow2_at_most(n: int, cap: int) -> int:
    g = 1
    while g * 2 <= min(n, cap):
        g *= 2
    return g


def run_reduce(L, rows, cols, final, dest, args, view, nk: int, m: int, k: int,
               out_dtype: str) -> None:
    """Launch a reduction of `m` rows of `k` elements into `dest` (m elements).

    Many rows with the reduced axes outermost in memory: one thread per row (`cols`). Short
    rows: groups of G < threads threads per row, several rows per block. A few long rows: each
    row split over S blocks, partial results reduced by a second pass (`final`).
    """
    if m == 0:
        return
    t = L.threads
    if cols is not None and m >= t and view.ndim > nk and nk > 0:
        kept_stride = abs(view.strides[nk - 1])
        red_stride = min(abs(s) for s, n in zip(view.strides[nk:], view.shape[nk:]) if n > 1) \
            if any(n > 1 for n in view.shape[nk:]) else 0
        if kept_stride < red_stride:
            cols(blocks(L, m), t, dest, *args, m, k)
            return
    g = _pow2_at_most(max(k, 1), t)
    splits = 1
    if g == t and m < L.max_blocks and k > 2 * t:
        splits = max(1, min(L.max_blocks // m, -(-k // (2 * t))))
    if splits == 1:
        rows(blocks(L, m, t // g), t, dest, *args, m, k, g, 1)
        return
    partial = L.empty((m * splits,), out_dtype)
    rows(blocks(L, m * splits, 1), t, partial, *args, m, k, t, splits)
    g2 = _pow2_at_most(splits, t)
    final(blocks(L, m, t // g2), t, dest, partial.reshape(m, splits), m, splits, g2, 1)


def run_arg(L, kernel, dest, view, m: int, k: int, op_name: str, split=None,
            pick=None) -> None:
    """Launch an argmax/argmin over `m` rows of `k` elements. A few long rows are split over
    blocks (`split`: each chunk's extreme and its index), then `pick` finds per row the
    chunk holding the first extreme (chunks in order: ties go to the lower index, a NaN's
    chunk wins) and its index is taken."""
    if m == 0:
        return
    if k == 0:
        raise ValueError(f"{op_name}: attempt to get the index of an extreme of an empty "
                         f"sequence")
    t = L.threads
    g = _pow2_at_most(k, t)
    chunks = max(1, min(L.max_blocks // m, -(-k // (4 * t)))) if split is not None \
        and g == t and m < L.max_blocks else 1
    if chunks == 1:
        kernel(blocks(L, m, t // g), t, dest, view, m, k, g)
        return
    values = L.empty((m * chunks,), view.dtype)
    indices = L.empty((m * chunks,), np.int64)
    split(blocks(L, m * chunks), t, values, indices, view, m, k, g, chunks)
    best = L.empty((m,), np.int64)
    gp = _pow2_at_most(chunks, t)
    pick(blocks(L, m, t // gp), t, best, values.reshape(m, chunks), m, chunks, gp)
    dest[...] = L.xp.take_along_axis(indices.reshape(m, chunks), best.reshape(m, 1), 1)[:, 0]


def join_shape(op_name: str, axis: int, shapes) -> tuple:
    """The shape of the concatenation of `shapes` along `axis`; ValueError when they differ."""
    first = tuple(shapes[0])
    for s in shapes[1:]:
        if len(s) != len(first) or any(a != b for d, (a, b) in enumerate(zip(s, first))
                                       if d != axis):
            raise ValueError(f"{op_name}: cannot join arrays of shapes "
                             f"{', '.join(str(tuple(x)) for x in shapes)}")
    total = sum(int(s[axis]) for s in shapes)
    return first[:axis] + (total,) + first[axis + 1:]


def sum_to_target(op_name: str, shape, target) -> tuple:
    """The run-time target shape of SumToShape; ValueError when `shape` cannot reduce to it."""
    tgt = tuple(int(t) for t in np.asarray(target).reshape(-1))
    if len(tgt) != len(shape) or any(t != n and t != 1 for t, n in zip(tgt, shape)):
        raise ValueError(f"{op_name}: cannot reduce shape {tuple(shape)} to {tgt}")
    return tgt


def run_cumsum(L, kernel, out, x) -> None:
    """Launch a per-row running sum over the last axis of `x` into `out` (same shape)."""
    k = x.shape[-1]
    m = size(x.shape[:-1])
    if m and k:
        kernel(blocks(L, m), L.threads, out, x, m, k)


def arange_params(start, stop, step, dtype: str, op_name: str):
    """(length, start, delta) of numpy.arange: values are start + i * delta, with delta the
    difference of the first two values in `dtype` (numpy's fill), in float64 or int64."""
    start, stop, step = (np.asarray(v).item() for v in (start, stop, step))
    if step == 0:
        raise ValueError(f"{op_name}: step is zero")
    n = max(0, int(np.ceil((stop - start) / step)))
    t = np.dtype(dtype).type
    calc = np.float64 if np.dtype(dtype).kind == "f" else np.int64
    with np.errstate(all="ignore"):
        first, second = t(start), t(start + step)
        return n, calc(first), calc(second) - calc(first)


def basic_index(a, idx_list, values, op_name: str):
    """a[index] for a basic index structure and host index values (a view)."""
    try:
        return a[_build_index(idx_list, values) + (Ellipsis,)]
    except (IndexError, ValueError) as exc:
        raise type(exc)(f"{op_name}: {exc} (input shape {tuple(a.shape)})") from None


def index_args(L, x, arrays, ints, entries, at: int, op_name: str):
    """(indexed shape, kernel index arguments in axis order) of an advanced index on view `x`:
    index arrays broadcast to their common block shape, integers as int64 scalars."""
    try:
        block = tuple(np.broadcast_shapes(*[a.shape for a in arrays]))
    except ValueError:
        raise IndexError(f"{op_name}: index arrays of shapes "
                         f"{', '.join(str(tuple(a.shape)) for a in arrays)} cannot be broadcast "
                         f"together") from None
    sliced = [x.shape[axis] for axis, e in enumerate(entries) if e[0] == "slice"]
    shape = tuple(sliced[:at]) + block + tuple(sliced[at:])
    if size(shape) == 0:  # no thread reads the indices: numpy still checks them
        _check_bounds(L, x, arrays, ints, entries, op_name, arrays_read=size(block) > 0)
    arrays, ints = iter(arrays), iter(ints)
    args = []
    for e in entries:
        if e[0] == "array":
            args.append(L.xp.broadcast_to(next(arrays), block))
        elif e[0] == "int":
            args.append(next(ints))
    return shape, args


def _check_bounds(L, x, arrays, ints, entries, op_name: str, arrays_read: bool) -> None:
    """numpy's bounds check of indices nothing reads: an index array is checked on the device
    into an error flag (no read back, so the call stays capturable as a CUDA graph). numpy
    checks integers always, index arrays only where their broadcast block is not empty
    (`arrays_read`)."""
    arrays, ints = iter(arrays), iter(ints)
    for axis, e in enumerate(entries):
        if e[0] not in ("array", "int"):
            continue
        n = x.shape[axis]
        message = f"{op_name}: an index is out of bounds for axis {axis} of size {n}"
        if e[0] == "int":
            if not -n <= next(ints) < n:
                raise IndexError(message)
            continue
        index = next(arrays)
        if arrays_read and index.size:
            flag = L.error_flag(IndexError, message)
            flag[...] = L.xp.any((index < -n) | (index >= n))


def broadcast_value(L, v, shape, op_name: str):
    """`v` broadcast to `shape` (ValueError naming the op when it cannot)."""
    try:
        return L.xp.broadcast_to(v, shape)
    except ValueError:
        raise ValueError(f"{op_name}: a value of shape {tuple(v.shape)} cannot be broadcast to "
                         f"the indexed shape {tuple(shape)}") from None


def mask_indices(L, mask, shape, axis: int, op_name: str):
    """The index arrays of a boolean mask over the axes of `shape` from `axis` on (its
    nonzero(): compacted on the device, the count read back once); IndexError naming the op
    when the mask's shape does not match, as numpy's."""
    for k, n in enumerate(mask.shape):
        if axis + k >= len(shape) or shape[axis + k] != n:
            size = shape[axis + k] if axis + k < len(shape) else "missing"
            raise IndexError(f"{op_name}: boolean index did not match the indexed array along "
                             f"axis {axis + k}; the axis has size {size} but the boolean axis "
                             f"has size {n}")
    return tuple(L.xp.nonzero(mask))


def run_index_set(L, claim, kernel, values, x, args, op_name: str) -> None:
    """A scatter-set keeping, as numpy does, the last value each element is given: `claim`
    marks per element the last j writing it, then `kernel` writes only those."""
    n = size(values.shape)
    if n == 0:
        return
    win = L.xp.full(x.shape, -1, dtype=np.int64)
    err = _out_of_bounds_flag(L, x, op_name)
    claim(blocks(L, n), L.threads, values, win, *args, err, n)
    kernel(blocks(L, n), L.threads, values, x, win, *args, err, n)


def run_index(L, kernel, first, x, args, op_name: str) -> None:
    """Launch a gather (first = output) or scatter (first = values) over the indexed shape."""
    n = size(first.shape)
    if n == 0:
        return
    kernel(blocks(L, n), L.threads, first, x, *args, _out_of_bounds_flag(L, x, op_name), n)


def _out_of_bounds_flag(L, x, op_name: str):
    """The error flag an index kernel sets for an index out of `x`'s bounds."""
    return L.error_flag(IndexError, f"{op_name}: an index is out of bounds for the indexed "
                                    f"array of shape {tuple(x.shape)}")


def run_scan(L, op, body, n, *inputs):
    """A Scan's loop driven from the host on device arrays (Scan.run_loop): each step calls
    the host function of the body's sub-program (`body(L, *args)`, its kernels on views of the
    sequences and of the states' rows), its results copied into the outputs' rows on the
    device; a stopping condition is read back each step."""
    return op.run_loop(n, inputs, lambda args: body(L, *args), empty=L.empty,
                       truth=lambda value: bool(L.to_host(value)), copy=L.copy)


def run_scan_elementwise(L, op, kernel, body, n, *inputs):
    """A Scan with an elementwise body as one kernel (scan_kernel.py): each thread carries
    its elements through every step. Where the run-time shapes are not what that kernel
    takes (an operand broadcast along a length-1 axis, states of different shapes), the
    host-driven loop (run_scan) runs instead."""
    lay = op.layout
    n = int(n)
    seqs = inputs[:lay.n_seqs]
    inits = inputs[lay.n_seqs:lay.n_seqs + lay.n_states]
    non_seqs = inputs[lay.n_seqs + lay.n_states:]
    shape = tuple(inits[0].shape)
    rank = len(shape)

    def element_shape_fits(var, value_shape):
        return tuple(value_shape) == (shape if var.type.ndim == rank and rank else ())

    inner = op.fgraph.inputs
    fits = (n >= 0 and all(tuple(h.shape) == shape for h in inits)
            and all(seq.shape[0] >= n and element_shape_fits(v, seq.shape[1:])
                    for seq, v in zip(seqs, inner[:lay.n_seqs]))
            and all(element_shape_fits(v, a.shape)
                    for a, v in zip(non_seqs, inner[lay.n_seqs + lay.n_states:])))
    if not fits:
        return run_scan(L, op, body, n, *inputs)
    elems = size(shape)

    def flat(a, lead):
        return L.xp.ascontiguousarray(a).reshape(lead)

    traces = [L.empty((1 + n if lay.kept(q) != 1 else 1, elems), t.dtype)
              for q, t in enumerate(op.state_types)]
    nit_types = [v.type for v in op.fgraph.outputs[lay.n_states:lay.n_outputs]]
    nits = [L.empty((n, elems), t.dtype) for t in nit_types]
    args = [*traces, *nits, *(flat(h, (elems,)) for h in inits)]
    for seq, v in zip(seqs, inner[:lay.n_seqs]):
        per_element = v.type.ndim == rank and rank
        args.append(flat(seq[:n], (n, elems) if per_element else (n,)))
    for a, v in zip(non_seqs, inner[lay.n_seqs + lay.n_states:]):
        args.append(flat(a, (elems,) if v.type.ndim == rank and rank else (1,)))
    if elems:
        kernel(blocks(L, elems), L.threads, *args, elems, n)
    outputs = []
    for o, value in enumerate(traces + nits):
        value = value.reshape((value.shape[0], *shape))
        kept = lay.kept(o)
        outputs.append(value if kept is None or kept == 1 and o < lay.n_states
                       else L.copy(value[-kept:]))
    return outputs
