"""The memory of a loop's gradient: rnn_grad (the suite's program, f64, H=64) at several T.

`python -m benchmarks.loop_memory [--steps 1000,3000] [--against PATH] [--json]` compiles the
loss and its gradients (h0, x, w) in a fresh process, calls it on a tiny input (compiled,
warm) and once on T steps (the workspace the runner keeps then grows to what T needs), and
reports `Program.peak_bytes` for those shapes, how far the process's RSS rises above what it
was during the next call on T steps (the first to use that workspace; Linux: the peak RSS is
reset through /proc/self/clear_refs first, and glibc maps every array of 64 KiB or more on
its own, so the RSS follows what is live), and what the forward trace and the gradients
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
import gc, json, sys
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
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
f(*inputs(3))
args = inputs(T)
f(*args)  # (the workspace the runner keeps grows to what T needs, untouched until the next)
gc.collect()
before = status("VmRSS")
open("/proc/self/clear_refs", "w").write("5")  # the peak RSS starts again from now
out = f(*args)
growth = status("VmHWM") - before  # (read first: building f.program allocates too)
print(json.dumps({"peak_bytes": f.program.peak_bytes([a.shape for a in args]),
                  "rss_growth": growth,
                  "floor": (T + 1) * H * 8 + sum(np.asarray(o).nbytes for o in out[1:])}))
"""


def _probe(tree: str, steps: int) -> dict:
    # (a fixed threshold: every array of 64 KiB or more is mapped when allocated and
    # unmapped when freed, so the RSS follows what is live, not what malloc kept from before)
    env = dict(os.environ, PYTHONPATH=tree, MALLOC_MMAP_THRESHOLD_="65536")
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
                rows.append([label, str(steps), r["error"], "-", "-", "-", "-"])
                continue
            rows.append([label, str(steps), f"{r['peak_bytes'] / 1e6:.2f} MB",
                         f"{r['rss_growth'] / 1e6:.2f} MB", f"{r['floor'] / 1e6:.2f} MB",
                         f"{r['peak_bytes'] / r['floor']:.2f}x",
                         f"{r['rss_growth'] / r['floor']:.2f}x"])
    headers = ["verglas", "T", "Program.peak_bytes", "RSS growth of a call",
               "forward trace + gradients", "peak_bytes / that", "RSS growth / that"]
    print(report.table(headers, rows))
    if args.json:
        report.write_table(
            "loop-memory", dict(report.header("cpu"), trees=trees, results=results),
            "rnn_grad's memory (f64, H=64)",
            "In a fresh process: a tiny call (compiled, warm), a call on T steps (the "
            "runner's workspace grows to what they need), then `Program.peak_bytes` for T "
            "steps and how far the process's RSS rises during the next call on them, the "
            "first to use that workspace (peak RSS reset first through /proc/self/clear_refs; "
            "MALLOC_MMAP_THRESHOLD_=65536: each array of 64 KiB or more mapped on its own, "
            "unmapped when freed); the last columns compare both with the forward trace "
            "plus the gradients' own size.", headers, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
