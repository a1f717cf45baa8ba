"""Batch inference of the demo MLP over a dask array, on a local cluster of worker processes.

    python examples/dask_inference.py                     # 1e7 rows, 2 workers
    python examples/dask_inference.py --rows 1000000 --workers 4

The model is verglas.demo's MLP (64-256-256-8, tanh, float32), compiled once here. Its
Function travels to the workers inside the tasks (pickled with its optimized graph and Program,
not its machine code); each worker process builds its runner once, loading the machine code this
process stored in the cache directory they share. `verglas.dask.map_blocks` takes the output's
chunks and dtype from the Function. The result is checked against numpy on the same blocks.
"""

from __future__ import annotations

import argparse
import os
import time

# the workers each run one task at a time on a core: no row loops on threads (set before
# verglas reads it; the workers inherit it, and this process compiles what they will load)
os.environ.setdefault("VERGLAS_THREADS", "0")

import dask.array as da  # noqa: E402
import numpy as np  # noqa: E402
from distributed import Client, LocalCluster, wait  # noqa: E402

import verglas as vg  # noqa: E402
import verglas.dask  # noqa: E402
from verglas import demo  # noqa: E402


def forward(x, params, tanh=vg.tanh):
    """The MLP's forward pass: tanh hidden layers, a linear last layer (with np.tanh: numpy's)."""
    h = x
    for k in range(0, len(params) - 2, 2):
        h = tanh(h @ params[k] + params[k + 1])
    return h @ params[-2] + params[-1]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=float, default=1e7)
    parser.add_argument("--chunk", type=int, default=200_000, help="rows per block")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    rows = int(args.rows)

    x, _, params = demo.symbolic_inputs()
    model = vg.compile([x, *params], forward(x, params))
    _, _, weights = demo.data(np.random.default_rng(0))

    with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        # the rows are made on the workers and stay there
        xs = da.random.default_rng(1).standard_normal(
            (rows, demo.WIDTHS[0]), chunks=(args.chunk, demo.WIDTHS[0]), dtype=np.float32)
        xs = xs.persist()
        wait(xs)
        print(f"{rows:,} rows x {demo.WIDTHS[0]} float32 ({xs.nbytes / 2**30:.2f} GiB) in "
              f"{xs.numblocks[0]} blocks on {args.workers} workers")

        t0 = time.perf_counter()
        ys = verglas.dask.map_blocks(model, xs, *weights).persist()
        wait(ys)
        seconds = time.perf_counter() - t0
        print(f"verglas: {ys.shape} {ys.dtype} in {seconds:.2f} s, {rows / seconds / 1e6:.2f} "
              f"M rows/s (each worker's first block loads the compiled program)")
        builds = client.run(verglas.dask.runner_builds)
        print("runners built per worker (compiled or loaded):",
              {w: b.get(model.cache_key, 0) for w, b in builds.items()})

        want = xs.map_blocks(forward, weights, tanh=np.tanh, chunks=(args.chunk, demo.WIDTHS[-1]),
                             dtype=np.float32)
        close, error = da.compute(da.allclose(ys, want, rtol=1e-4, atol=1e-5),
                                  abs(ys - want).max())
        print(f"equal to numpy's (rtol 1e-4, atol 1e-5): {close}; largest difference {error:.2g}")
        if not close:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
