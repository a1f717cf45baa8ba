"""Cold compile time of one program as users spell it: big_graph with 0-d coefficient inputs
(the suite's spelling) and with one coefficient vector indexed per term (`a[i] * sin(x + i)`).

`python -m benchmarks.spelling [--terms 500,2000] [--repeat 3] [--against PATH] [--json]`
builds, compiles and first calls each spelling in a fresh process with an empty verglas cache
(numba's own start-up and verglas's import are outside the time), and reports wall seconds,
the process's CPU seconds, its peak RSS and the Program's steps. `--against` runs another
checkout's verglas (a commit before a change, say) in turn with this one, round by round, so
both see the same machine.
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

SPELLINGS = ("scalars", "indexed")

_PROBE = """
import json, resource, sys, time
import numpy as np
import verglas as vg
spelling, terms = sys.argv[1], int(sys.argv[2])
t0 = time.perf_counter()
x = vg.tensor("x", (None,), "float64")
if spelling == "indexed":
    a = vg.tensor("a", (terms,), "float64")
    coefs, inputs, values = [a[i] for i in range(terms)], [x, a], [np.arange(terms) / terms]
else:
    coefs = [vg.tensor(f"a{i}", (), "float64") for i in range(terms)]
    inputs, values = [x, *coefs], [np.float64(i / terms) for i in range(terms)]
acc = coefs[0] * vg.sin(x)
for i in range(1, terms):
    acc = acc + coefs[i] * vg.sin(x + i)
f = vg.compile(inputs, acc)
xv = np.linspace(-3, 3, 1000)
got = f(xv, *values)
wall = time.perf_counter() - t0
c = np.asarray(values if spelling == "scalars" else values[0], dtype=float).reshape(-1)
want = sum(c[i] * np.sin(xv + i) for i in range(terms))
ru = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime,
                  "rss_mb": ru.ru_maxrss / 1024, "steps": len(f.program.steps),
                  "max_error": float(np.abs(got - want).max())}))
"""


def _warm_numba(tree: str) -> None:
    """numba's caches of verglas's own library routines (the sin slow path), once per tree."""
    _probe(tree, "scalars", 3)


def _probe(tree: str, spelling: str, terms: int) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, PYTHONPATH=tree, VERGLAS_CACHE_DIR=cache)
        out = subprocess.run([sys.executable, "-c", _PROBE, spelling, str(terms)], env=env,
                             cwd=tree, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1][:300]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--terms", default="500,2000")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--against", help="another checkout's root, run in turn with this one")
    parser.add_argument("--json", action="store_true",
                        help="write benchmarks/results/compile-spelling-<date>.json and .md")
    args = parser.parse_args(argv)
    here = str(Path(__file__).resolve().parent.parent)
    trees = {"this": here, **({"against": str(Path(args.against).resolve())}
                              if args.against else {})}
    for tree in trees.values():
        _warm_numba(tree)
    samples: dict = {}
    for _ in range(args.repeat):
        for label, tree in trees.items():
            for spelling in SPELLINGS:
                for terms in map(int, args.terms.split(",")):
                    samples.setdefault((label, spelling, terms), []).append(
                        _probe(tree, spelling, terms))
    rows, results = [], []
    for (label, spelling, terms), runs in samples.items():
        ok = [r for r in runs if "error" not in r]
        med = {k: sorted(r[k] for r in ok)[len(ok) // 2] for k in
               ("wall_s", "cpu_s", "rss_mb")} if ok else {}
        results.append({"tree": label, "spelling": spelling, "terms": terms, "runs": runs,
                        "median": med})
        rows.append([label, spelling, str(terms),
                     f"{med['wall_s']:.2f} s" if ok else runs[0]["error"],
                     f"{med['cpu_s']:.2f} s" if ok else "-",
                     f"{med['rss_mb']:.0f} MB" if ok else "-",
                     str(ok[0]["steps"]) if ok else "-"])
    headers = ["verglas", "spelling", "terms", "compile + first call (median)", "CPU",
               "peak RSS", "steps"]
    print(report.table(headers, rows))
    if args.json:
        report.write_table(
            "compile-spelling", dict(report.header("cpu"), trees=trees, results=results),
            "big_graph's cold compile by spelling",
            "Wall seconds from building the graph to the first result, in a fresh process "
            "with an empty verglas cache (import and numba's start-up excluded); CPU seconds "
            "of the whole process; medians of the rounds, the trees run in turn.",
            headers, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
