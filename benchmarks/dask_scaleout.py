"""Scale-out on dask: the demo MLP over 1e7 rows on a local cluster against one process.

    python -m benchmarks.dask_scaleout --json            # 1e7 rows, 2 workers

The same blocks are computed twice: by `verglas.dask.map_blocks` on `--workers` worker
processes (the rows made and kept there, the results kept there: `persist`), and one after the
other by verglas in this process (each block fetched first, then timed). The goal: the cluster's
time within 1.3x of the one process's time divided by the number of workers.

Both sides run row loops without threads (`VERGLAS_THREADS=0`) and BLAS on one thread (dask's
nanny sets that for its workers; threadpoolctl here), so each worker uses one core as the one
process does; the machine should have a core per worker.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

os.environ["VERGLAS_THREADS"] = "0"  # (before verglas reads it; the workers inherit it)

import dask  # noqa: E402
import dask.array as da  # noqa: E402
import distributed  # noqa: E402
import numpy as np  # noqa: E402
from distributed import Client, LocalCluster, wait  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

import verglas as vg  # noqa: E402
import verglas.dask  # noqa: E402
from benchmarks import report  # noqa: E402
from verglas import demo  # noqa: E402

GOAL = 1.3


def model():
    """The demo MLP's forward pass as a Function, and its weights."""
    x, _, params = demo.symbolic_inputs()
    h = x
    for k in range(0, len(params) - 2, 2):
        h = vg.tanh(h @ params[k] + params[k + 1])
    f = vg.compile([x, *params], h @ params[-2] + params[-1])
    return f, demo.data(np.random.default_rng(0))[2]


def warm(f, weights) -> None:
    """One call on a worker: it builds its runner (loads the machine code) before the timing."""
    f(np.zeros((1, demo.WIDTHS[0]), np.float32), *weights)


def one_process(f, weights, xs) -> list[float]:
    """Seconds of `f` on each block of `xs`, one block after the other in this process."""
    times = []
    with threadpool_limits(1, "blas"):
        f(xs.blocks[0].compute(), *weights)
        for k in range(xs.numblocks[0]):
            block = xs.blocks[k].compute()
            t0 = time.perf_counter()
            f(block, *weights)
            times.append(time.perf_counter() - t0)
    return times


def forget(client, result, timeout: float = 30.0) -> None:
    """Release a persisted result and wait until no worker holds its blocks any more."""
    keys = [k for k in dask.core.flatten(result.__dask_keys__())]
    client.cancel(result)
    deadline = time.perf_counter() + timeout
    while any(client.who_has(keys).values()) and time.perf_counter() < deadline:
        time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.dask_scaleout",
                                description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=float, default=1e7)
    p.add_argument("--chunk", type=int, default=200_000, help="rows per block")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--repeat", type=int, default=2, help="timed runs on the cluster")
    p.add_argument("--json", action="store_true",
                   help="write benchmarks/results/dask-<date>.json, .md and .png")
    args = p.parse_args(argv)
    rows = int(args.rows)
    record = report.header("cpu", None if argv is None else
                           ["-m", "benchmarks.dask_scaleout", *argv])
    record["versions"].update(dask=dask.__version__, distributed=distributed.__version__)
    f, weights = model()
    with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        xs = da.random.default_rng(1).random((rows, demo.WIDTHS[0]), dtype=np.float32,
                                             chunks=(args.chunk, demo.WIDTHS[0]))
        xs = (xs - 0.5).persist()
        wait(xs)
        client.run(warm, f, weights)
        cluster_s = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            ys = verglas.dask.map_blocks(f, xs, *weights).persist()
            wait(ys)
            cluster_s.append(time.perf_counter() - t0)
            forget(client, ys)  # (else the next run finds the same keys computed: no work)
        builds = {w: b.get(f.cache_key, 0)
                  for w, b in client.run(verglas.dask.runner_builds).items()}
        blocks = one_process(f, weights, xs)
    serial = sum(blocks)
    ideal = serial / args.workers
    median = statistics.median(cluster_s)
    ratio = median / ideal
    print(f"{rows:,} rows in {len(blocks)} blocks of {args.chunk:,}: one process "
          f"{serial:.2f} s ({serial / args.workers:.2f} s / {args.workers} workers); "
          f"{args.workers} dask workers {', '.join(f'{s:.2f}' for s in cluster_s)} s; "
          f"median / ideal {ratio:.2f}x (goal {GOAL}x: {'met' if ratio <= GOAL else 'MISSED'})")
    print(f"runners built per worker: {builds}")
    if args.json:
        main_name = f"verglas on dask ({args.workers} workers)"
        peer = f"verglas, one process / {args.workers}"
        case = f"mlp_fwd[{rows:.0e} rows,64-256-256-8,f32]"
        record.update(options=vars(args), threads="VERGLAS_THREADS=0 and one BLAS thread in "
                      "every process", builds_per_worker=builds, block_s=blocks,
                      results=[
                          {"case": case, "framework": main_name, "status": "ok",
                           "median_s": median, "min_s": min(cluster_s), "samples_s": cluster_s},
                          {"case": case, "framework": peer, "status": "ok", "median_s": ideal,
                           "min_s": ideal, "samples_s": [ideal]}])
        rows_md = [[case, report.fmt_time(serial), report.fmt_time(ideal),
                    ", ".join(report.fmt_time(s) for s in cluster_s), f"{ratio:.2f}x",
                    f"{GOAL}x ({'met' if ratio <= GOAL else 'missed'})"]]
        text = (f"{rows:,} rows in {len(blocks)} blocks of {args.chunk:,} rows, made and kept "
                f"on {args.workers} worker processes (LocalCluster, one thread each); "
                f"`verglas.dask.map_blocks(...).persist()` timed after one warm-up call per "
                f"worker, against the same blocks fetched to this process and run one after "
                f"the other. Row loops off (`VERGLAS_THREADS=0`) and one BLAS thread in every "
                f"process, so each uses one core. Runners built per worker (compiled or loaded "
                f"from the shared cache): {', '.join(map(str, builds.values()))}.")
        headers = ["program", "one process", f"one process / {args.workers}",
                   f"dask, {args.workers} workers (runs)", "dask median / ideal", "goal"]
        markdown = "\n\n".join([f"# verglas on dask: scale-out ({args.workers} workers)",
                                report.describe(record), text,
                                report.table(headers, rows_md, markdown=True)])
        for path in report.write("dask", record, markdown):
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
