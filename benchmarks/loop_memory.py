"""The memory of a loop's gradient: rnn_grad (the suite's program, f64, H=64) at several T.

`python -m benchmarks.loop_memory [--steps 1000,3000] [--against PATH] [--json]` compiles the
loss and its gradients (h0, x, w) in a fresh process, calls it once on a tiny input (compiled,
warm), then once on T steps, and reports `Program.peak_bytes` for those shapes, the growth of
the process's peak RSS over that call, and what the forward trace and the gradients
themselves hold (the floor any implementation keeps). `--against` runs another checkout's
verglas (a commit before a change, say) in turn with this one.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from benchmarks import report

_PROBE = """
import gc, json, resource, sys
import numpy as np
import verglas as vg
T, H = int(sys.argv[1]), 64
names = ("h0", "x", "w", "u", "b")
h0, x, w, u, b = (vg.tensor(n, shape=(None,) * d, dtype="float64")
                  for n, d in zip(names, (1, 2, 2, 2, 1)))
hs = vg.scan(lambda x_t, h: vg.tanh(h @ w + x_t @ u + b), sequences=x, outputs_info=h0)
loss = vg.mean(hs ** 2)
f = vg.compile([h0, x, w, u, b], [loss, *vg.grad(loss, [h0, x, w])])
rng = np.random.default_rng(0)
def inputs(t):
    return [rng.standard_normal(H) * 0.1, rng.standard_normal((t, H)),
            rng.standard_normal((H, H)) / 8, rng.standard_normal((H, H)) / 8,
            rng.standard_normal(H) * 0.1]
f(*inputs(3))
args = inputs(T)
gc.collect()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
out = f(*args)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"peak_bytes": f.program.peak_bytes([a.shape for a in args]),
                  "rss_growth": (after - before) * 1024,
                  "floor": (T + 1) * H * 8 + sum(np.asarray(o).nbytes for o in out[1:])}))
"""


def _probe(tree: str, steps: int) -> dict:
    env = dict(os.environ, PYTHONPATH=tree)
    out = subprocess.run([sys.executable, "-c", _PROBE, str(steps)], env=env, cwd=tree,
                         capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1][:300]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", default="1000,3000")
    parser.add_argument("--against", help="another checkout's root, run in turn with this one")
    parser.add_argument("--json", action="store_true",
                        help="write benchmarks/results/loop-memory-<date>.json and .md")
    args = parser.parse_args(argv)
    here = str(Path(__file__).resolve().parent.parent)
    trees = {"this": here, **({"against": str(Path(args.against).resolve())}
                              if args.against else {})}
    rows, results = [], []
    for steps in map(int, args.steps.split(",")):
        for label, tree in trees.items():
            r = _probe(tree, steps)
            results.append({"tree": label, "steps": steps, **r})
            if "error" in r:
                rows.append([label, str(steps), r["error"], "-", "-", "-"])
                continue
            rows.append([label, str(steps), f"{r['peak_bytes'] / 1e6:.2f} MB",
                         f"{r['rss_growth'] / 1e6:.1f} MB", f"{r['floor'] / 1e6:.2f} MB",
                         f"{r['peak_bytes'] / r['floor']:.1f}x"])
    headers = ["verglas", "T", "Program.peak_bytes", "RSS growth of the call",
               "forward trace + gradients", "peak / that"]
    print(report.table(headers, rows))
    if args.json:
        report.write_table(
            "loop-memory", dict(report.header("cpu"), trees=trees, results=results),
            "rnn_grad's memory (f64, H=64)",
            "In a fresh process: a tiny call first (compiled, warm), then `Program.peak_bytes` "
            "for T steps and the growth of the process's peak RSS over the call on them; "
            "the last columns compare peak_bytes with the forward trace plus the gradients' "
            "own size.", headers, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
