"""Temporaries in a workspace kept across calls against temporaries allocated at every call.

`python -m benchmarks.workspace [--json]` compiles each program whose temporaries use the
workspace twice (the default, and with the workspace switched off as VERGLAS_WORKSPACE=0 does)
and times both with numpy's version in turn, in one process. It runs once with glibc's
allocator as it comes and once with its mmap threshold pinned at 128 KB
(MALLOC_MMAP_THRESHOLD_): every block of 128 KB or more is then mapped and unmapped at each
allocation, the allocator state in which MB-sized temporaries cost page faults on every call.
softmax and logsumexp fuse into row loops with no temporaries: they are the controls (both
builds are the same code there).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from benchmarks import report
from benchmarks.peers import frameworks
from benchmarks.programs import PROGRAMS
from benchmarks.timing import measure

PROGRAM_NAMES = ["mlp_fwd", "mlp_grad", "softmax", "logsumexp"]
PINNED = {"MALLOC_MMAP_THRESHOLD_": str(128 * 1024)}
ROUNDS = 5


def _measure_here(names: list[str]) -> list[dict]:
    """Per program: median seconds with and without the workspace, and numpy's (interleaved)."""
    import verglas as vg

    frames = {f.name: f for f in frameworks("cpu")}
    rows = []
    for name in names:
        for case in PROGRAMS[name]("cpu", False):
            arrays = case.make_inputs()
            runs = {}
            for use in (True, False):
                vg.config.workspace = use
                runs["workspace" if use else "fresh"] = frames["verglas"].build(case, arrays)
            del vg.config.workspace  # (back to the environment's)
            runs["numpy"] = frames["numpy"].build(case, arrays)
            times: dict[str, list[float]] = {k: [] for k in runs}
            for _ in range(ROUNDS):  # in turn, so that all see the same machine
                for key, run in runs.items():
                    times[key].append(measure(run, repeat=3, min_total=0.1).median)
            rows.append({"program": case.label,
                         **{k: sorted(v)[len(v) // 2] for k, v in times.items()}})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true",
                        help="write benchmarks/results/workspace-<date>.json and .md")
    parser.add_argument("--programs", default=",".join(PROGRAM_NAMES))
    parser.add_argument("--here", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    names = args.programs.split(",")
    if args.here:  # one allocator setting: the parent reads the rows from stdout
        print(json.dumps(_measure_here(names)))
        return 0
    results = {}
    for label, extra in (("default", {}), ("mmap threshold pinned", PINNED)):
        out = subprocess.run(
            [sys.executable, "-m", "benchmarks.workspace", "--here", "--programs", args.programs],
            env=dict(os.environ, **extra), capture_output=True, text=True, check=True)
        results[label] = json.loads(out.stdout.strip().splitlines()[-1])
    headers = ["allocator", "program", "workspace", "fresh", "numpy", "workspace/fresh",
               "workspace/numpy", "fresh/numpy"]
    rows = [[label, r["program"], report.fmt_time(r["workspace"]), report.fmt_time(r["fresh"]),
             report.fmt_time(r["numpy"]), report.fmt_ratio(r["workspace"], r["fresh"]),
             report.fmt_ratio(r["workspace"], r["numpy"]), report.fmt_ratio(r["fresh"], r["numpy"])]
            for label, found in results.items() for r in found]
    print(report.table(headers, rows))
    if args.json:
        record = dict(report.header("cpu"), results=results)
        markdown = report.describe(record) + "\n\n" + report.table(headers, rows, markdown=True)
        for path in report.write("workspace", record, markdown):
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
