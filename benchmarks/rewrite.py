"""Rewrite-pipeline time: verglas `rewrite_graph(fg, "fast_run")` beside PyTensor's rewrites.

`python -m benchmarks.rewrite [--repeat N] [--json] [--quick]`. Each sample builds a fresh graph
(untimed), then times the rewrite alone; node counts are Apply nodes before and after. PyTensor
runs the rewriter of its NUMBA mode (the fast_run query pytensor.function would run) on a
FunctionGraph guarded like pytensor.function's (inputs protected from inplace rewrites).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import programs, report


def chain(m, x, n: int):
    """An `n`-node elementwise chain cycling sin, + x, cos, * x (nothing folds away)."""
    y = x
    for i in range(n):
        match i % 4:
            case 0:
                y = m.sin(y)
            case 1:
                y = y + x
            case 2:
                y = m.cos(y)
            case 3:
                y = y * x
    return y


def graphs(quick: bool) -> dict[str, tuple[int, Callable]]:
    """name -> (number of scalar inputs a_i, body(m, x, *a))."""
    terms, length = (50, 1000) if quick else (500, 10_000)
    return {f"big_graph[{terms} terms]": (terms, programs.big_graph),
            f"ew_chain[{length} nodes]": (0, lambda m, x: chain(m, x, length))}


def verglas_sample(n_scalars: int, body: Callable) -> dict:
    """Build the graph with the public API, then time verglas' fast_run pipeline on it."""
    import verglas as vg
    from verglas.graph import FunctionGraph
    from verglas.rewrite import rewrite_graph

    t0 = time.perf_counter()
    x = vg.tensor("x", shape=(None,), dtype="float64")
    a = [vg.scalar(f"a_{i}", dtype="float64") for i in range(n_scalars)]
    fg = FunctionGraph([x, *a], [body(vg, x, *a)])
    t1 = time.perf_counter()
    before = len(fg.apply_nodes)
    rewrite_graph(fg, "fast_run")
    t2 = time.perf_counter()
    return {"build_s": t1 - t0, "rewrite_s": t2 - t1, "nodes_before": before,
            "nodes_after": len(fg.apply_nodes)}


def pytensor_sample(n_scalars: int, body: Callable) -> dict:
    """Build the graph in PyTensor, then time its NUMBA-mode rewriter on it."""
    import pytensor.tensor as pt
    from pytensor.compile.aliasing import Supervisor
    from pytensor.compile.mode import get_mode
    from pytensor.graph.fg import FunctionGraph

    from benchmarks.peers import pytensor_namespace

    rewriter = get_mode("NUMBA").optimizer
    t0 = time.perf_counter()
    x = pt.tensor("x", shape=(None,), dtype="float64")
    a = [pt.tensor(f"a_{i}", shape=(), dtype="float64") for i in range(n_scalars)]
    fg = FunctionGraph([x, *a], [body(pytensor_namespace(), x, *a)], clone=True)
    fg.attach_feature(Supervisor(fg.inputs))
    t1 = time.perf_counter()
    before = len(fg.apply_nodes)
    rewriter.rewrite(fg)
    t2 = time.perf_counter()
    return {"build_s": t1 - t0, "rewrite_s": t2 - t1, "nodes_before": before,
            "nodes_after": len(fg.apply_nodes)}


def measure(sample: Callable, n_scalars: int, body: Callable, repeat: int) -> dict:
    """`repeat` samples (after one untimed warmup): medians and mins, or the error."""
    try:
        sample(n_scalars, body)
        runs = [sample(n_scalars, body) for _ in range(repeat)]
    except Exception as exc:  # noqa: BLE001 -- an unfinished compiler is a table cell
        return {"error": f"{type(exc).__name__}: {exc}".splitlines()[0][:300],
                "traceback": traceback.format_exc(limit=6)}
    rewrite = [r["rewrite_s"] for r in runs]
    return {"rewrite_median_s": statistics.median(rewrite), "rewrite_min_s": min(rewrite),
            "rewrite_samples_s": rewrite,
            "build_median_s": statistics.median(r["build_s"] for r in runs),
            "nodes_before": runs[-1]["nodes_before"], "nodes_after": runs[-1]["nodes_after"]}


def rows(results: list[dict]) -> tuple[list[str], list[list[str]]]:
    """One row per (graph, framework); the verglas row carries the ratio."""
    headers = ["graph", "framework", "nodes before", "nodes after", "build",
               "rewrite median (min)", "verglas/pytensor"]
    by = {(r["graph"], r["framework"]): r for r in results}
    out = []
    for r in results:
        if "error" in r:
            out.append([r["graph"], r["framework"], "-", "-", "-",
                        "error: " + r["error"].split(":")[0], "-"])
            continue
        ratio = "-"
        peer = by.get((r["graph"], "pytensor"))
        if r["framework"] == "verglas" and peer and "error" not in peer:
            ratio = report.fmt_ratio(r["rewrite_median_s"], peer["rewrite_median_s"])
        out.append([r["graph"], r["framework"], str(r["nodes_before"]), str(r["nodes_after"]),
                    report.fmt_time(r["build_median_s"]),
                    (f"{report.fmt_time(r['rewrite_median_s'])} "
                     f"({report.fmt_time(r['rewrite_min_s'])})"), ratio])
    return headers, out


def main(argv: list[str] | None = None) -> int:
    """CLI: time both rewrite pipelines on both graphs, print, optionally record."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.rewrite", description=__doc__)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="50 terms, a 1000-node chain")
    p.add_argument("--json", action="store_true",
                   help="write benchmarks/results/rewrite-<date>.json and .md")
    args = p.parse_args(argv)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 100_000))  # deep chains, both sides
    results = []
    for name, (n_scalars, body) in graphs(args.quick).items():
        for fw, sample in (("verglas", verglas_sample), ("pytensor", pytensor_sample)):
            print(f"{name} {fw} ...", file=sys.stderr, flush=True)
            results.append({"graph": name, "framework": fw,
                            **measure(sample, n_scalars, body, args.repeat)})
    headers, table_rows = rows(results)
    print("\nrewrite pipeline time (fast_run), graph build excluded\n")
    print(report.table(headers, table_rows))
    errors = [f"{r['framework']} {r['graph']}: {r['error']}" for r in results if "error" in r]
    for line in errors:
        print(f"  ERROR {line}", file=sys.stderr)
    if args.json:
        record = report.header("cpu", None if argv is None
                               else ["-m", "benchmarks.rewrite", *argv])
        record.update(options=vars(args), results=results)
        md = ["# rewrite pipeline time", "", report.describe(record), "",
              report.table(headers, table_rows, markdown=True)]
        md += [f"- ERROR {line}" for line in errors]
        path, md_path = report.write("rewrite", record, "\n".join(md))
        print(f"\nwrote {path} and {md_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
