"""An elementwise loop shared out over numba's thread pool (parallel_for.py) in chunks: its
work estimate, the views each chunk loops over, and where the loop goes.

Each chunk loops from 0 over views `a[lo:hi]` of its rows: a loop from `lo` kept numba's
wraparound check on the index, and LLVM did not vectorize it (5x slower measured).
"""

from __future__ import annotations

from verglas.cpu_backend.parallel_for import parallel_range, pool_lines_since

__all__ = ["chunk_views", "share_loop", "call_kernel"]


def chunk_views(ctx, arrays) -> tuple[dict[str, str], list[str]]:
    """({array name: its chunk's view}, the lines making the views) for the names `arrays`
    (an array named twice gets one view: an inplace loop keeps one pointer)."""
    views: dict[str, str] = {}
    for name in arrays:
        views.setdefault(name, ctx.fresh("cv"))
    return views, [f"{view} = {name}[lo:hi]" for name, view in views.items()]


def share_loop(ctx, start: int, rows: str, size: str, setup: list[str], work: int, kind: str,
               in_kernel: bool) -> None:
    """Share out the loop emitted since line `start` (over the chunk views `setup` makes) of
    `size` elements in `rows` rows, `work` eighths of a work unit each (the scheduler's,
    schedule/pools.py). A step's loop moves into a function the pool runs over chunks of the
    rows; a shared kernel's (`in_kernel`) stays, the kernel takes `lo, hi` and its call sites
    hand it to the pool (ctx.pooled: how its rows are counted, `kind` 'flat' for elements or
    'first' for the first axis, and its work per element)."""
    if in_kernel:
        header = ctx.em.lines[start]
        indent = header[:len(header) - len(header.lstrip())]
        ctx.em.lines[start:start] = [indent + line for line in setup]
        ctx.pooled = (kind, work)
        return
    pool_lines_since(ctx, start, rows, size, work, setup)


def call_kernel(ctx, name: str, args: list[str], pooled, dims: list[str]) -> None:
    """Emit a step's call of shared kernel `name` on `args`: handed to the pool over its rows
    where the kernel takes them (`pooled`, see share_loop; `dims` the step's lengths)."""
    if pooled is None:
        ctx.line(ctx.src.callee_call(name, args))
        return
    kind, work = pooled
    rows, size = (dims[0] if kind == "first" else " * ".join(dims)), " * ".join(dims)
    ctx.src.root.parallel = True
    call = ctx.src.add_global("parallel_range", parallel_range)
    ctx.line(f"{call}({name}, {rows}, {size} * {work} // 8, ({''.join(a + ', ' for a in args)}))")
