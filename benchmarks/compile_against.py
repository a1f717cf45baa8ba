"""verglas's cold and warm compile times against another checkout's, in turn.

`python -m benchmarks.compile_against PATH [--programs ...] [--repeat 3] [--json]` runs the
compile suite's probes (benchmarks/compile_probe.py: a fresh process per compile, an empty
cache for the cold one, the cold one's cache for the warm one) for this tree's verglas and for
the one at PATH (a commit before a change, say), round by round, so both see the same machine:
the before/after comparison a change's record needs, without the peers' minutes. Both trees'
probes are this tree's (benchmarks/), so a program added since PATH is measured for both.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks import report
from benchmarks.programs import COMPILE_PROGRAMS


def _probe(tree: str, program: str, cache: str) -> dict:
    """One probe of `tree`'s verglas, run by this tree's benchmarks (the same probe and program
    definitions for both trees: a directory of links to the two packages)."""
    with tempfile.TemporaryDirectory() as root:
        os.symlink(Path(tree) / "verglas", Path(root) / "verglas")
        os.symlink(Path(__file__).resolve().parent, Path(root) / "benchmarks")
        env = dict(os.environ, PYTHONPATH=root)
        out = subprocess.run([sys.executable, "-m", "benchmarks.compile_probe", program,
                              "verglas", "--cache", cache], env=env, cwd=root,
                             capture_output=True, text=True, timeout=600)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        return {"error": (out.stderr.strip().splitlines() or ["no output"])[-1][:300]}
    return json.loads(lines[-1])


def _seconds(result: dict) -> float | None:
    if "error" in result:
        return None
    return result["compile_s"] + result["first_call_s"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("against", help="another checkout's root")
    parser.add_argument("--programs", default=",".join(COMPILE_PROGRAMS))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true",
                        help="write benchmarks/results/compile-against-<date>.json and .md")
    args = parser.parse_args(argv)
    trees = {"this": str(Path(__file__).resolve().parent.parent),
             "against": str(Path(args.against).resolve())}
    programs = args.programs.split(",")
    samples: dict = {}
    for _ in range(args.repeat):
        for program in programs:
            for label, tree in trees.items():
                with tempfile.TemporaryDirectory() as cache:
                    for kind in ("cold", "warm"):
                        samples.setdefault((program, kind, label), []).append(
                            _probe(tree, program, cache))
    rows, results = [], []
    for program in programs:
        for kind in ("cold", "warm"):
            row = [program, kind]
            medians = {}
            for label in trees:
                runs = samples[(program, kind, label)]
                secs = sorted(s for s in map(_seconds, runs) if s is not None)
                medians[label] = secs[len(secs) // 2] if secs else None
                row.append(f"{medians[label]:.3f} s ({secs[0]:.3f}-{secs[-1]:.3f})" if secs
                           else runs[0].get("error", "-"))
                results.append({"program": program, "kind": kind, "tree": label, "runs": runs,
                                "median_s": medians[label]})
            this, other = medians["this"], medians["against"]
            row.append(f"{this / other:.2f}x" if this and other else "-")
            rows.append(row)
    headers = ["program", "compile", "this (median, range)", "against", "this/against"]
    print(report.table(headers, rows))
    if args.json:
        report.write_table(
            "compile-against", dict(report.header("cpu"), trees=trees, results=results),
            "verglas's compile times against another checkout",
            "Compile plus first call in a fresh process (the suite's compile probe), cold with "
            "an empty cache, then warm from that cache; medians of the rounds, the trees in "
            "turn.", headers, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
