"""Compile time of a program's CUDA kernels to PTX, without a GPU.

`python -m benchmarks.cuda_ptx [--programs mlp_grad,softmax] [--json]` runs, per program, two
fresh processes on one new cache directory: the first compiles every kernel the CUDA
generator emits for it (cold: numba.cuda's compile_ptx, NVVM included), the second finds them
all in the on-disk cache (warm). Each process reports its stages: importing verglas, building
the graph and its Program and host code, importing numba.cuda, and compiling (or loading) the
kernels. A first call on a GPU compiles only the kernels it launches (one of each step's
contiguous/strided pair), so the cold figure is an upper bound of that; a third process, on a
cache directory of its own, compiles just those (found by running the program once under
numba's CUDA simulator, kernels matched by their place in the program): "first call, cold".
A fourth does the same as the runtime's first call does it: a helper process compiles every
kernel ahead, in program order, while this one asks for the launched ones (cache.Ahead):
"first call, cold, helper".
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

_PROBE = """
import json, sys, time
t0 = time.perf_counter()
from benchmarks import peers, programs
from verglas.cuda_backend import cache
from verglas.cuda_backend.codegen import Config, generate
from verglas.function import _optimize
from verglas.schedule import lower
t1 = time.perf_counter()
case = programs.cases([sys.argv[1]], "cuda", True)[0]  # (every length is None: sizes don't matter)
inputs, outs = peers.Verglas("cuda").graph(case, case.make_inputs())
src = generate(lower(_optimize(inputs, outs, "fast_run")), Config(threads=256))
every = list(src.all_kernels())
kernels = every
if len(sys.argv) > 2:  # only these (positions in all_kernels: what a first call launches)
    kernels = [every[k] for k in json.loads(sys.argv[2])]
t2 = time.perf_counter()
from verglas.cuda_backend.compat import numba_cuda
numba_cuda()
t3 = time.perf_counter()
if len(sys.argv) > 3:  # as a GPU's first call: a helper process compiles every kernel ahead
    ahead = cache.Ahead(every, (9, 0))
    for spec in kernels:
        ahead.ptx(spec)
    ahead.close()
else:
    for spec in kernels:
        cache.compile_ptx(spec, (9, 0))
t4 = time.perf_counter()
print(json.dumps({"kernels": len(kernels), "import_verglas": t1 - t0, "program": t2 - t1,
                  "import_numba_cuda": t3 - t2, "kernels_s": t4 - t3}))
"""


# the kernels a first call launches, by position in all_kernels(): the program run once under
# numba's CUDA simulator on the case's inputs (its kernels differ from a GPU's in their block
# size only, not in which steps launch which of them)
_LAUNCHED = """
import json, sys
import verglas as vg
from benchmarks import peers, programs
from verglas.cuda_backend import runtime
case = programs.cases([sys.argv[1]], "cuda", True)[0]
arrays = case.make_inputs()
inputs, outs = peers.Verglas("cuda").graph(case, arrays)
f = vg.compile(inputs, outs, device="cuda")
launched = set()
call = runtime.SimKernel.__call__
def spy(self, *args):
    launched.add(self.spec.fingerprint)
    return call(self, *args)
runtime.SimKernel.__call__ = spy
f(*arrays)
kernels = list(f._runner.generated.all_kernels())
print(json.dumps(sorted(k for k, spec in enumerate(kernels) if spec.fingerprint in launched)))
"""


def _launched(program: str) -> str | None:
    """The positions (JSON) of the kernels a first call of `program` launches, or None."""
    root = str(Path(__file__).resolve().parent.parent)
    with tempfile.TemporaryDirectory(prefix="verglas-sim-") as cache_dir:
        env = dict(os.environ, PYTHONPATH=root, VERGLAS_CACHE_DIR=cache_dir,
                   NUMBA_ENABLE_CUDASIM="1")
        done = subprocess.run([sys.executable, "-c", _LAUNCHED, program], env=env, cwd=root,
                              capture_output=True, text=True, timeout=1800)
    return done.stdout.strip().splitlines()[-1] if done.returncode == 0 else None


def _probe(program: str, cache_dir: str, only: str | None = None, ahead: bool = False) -> dict:
    root = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=root, VERGLAS_CACHE_DIR=cache_dir)
    extra = ([only] if only else []) + (["ahead"] if ahead else [])
    done = subprocess.run([sys.executable, "-c", _PROBE, program, *extra],
                          env=env, cwd=root, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["?"])[-1][:300]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", default="mlp_grad,mlp_fwd,softmax,ew_chain")
    parser.add_argument("--json", action="store_true",
                        help="write benchmarks/results/cuda-ptx-<date>.json and .md")
    args = parser.parse_args(argv)
    rows, results = [], []
    for program in args.programs.split(","):
        with tempfile.TemporaryDirectory(prefix="verglas-ptx-") as cache_dir, \
                tempfile.TemporaryDirectory(prefix="verglas-ptx-") as first_dir, \
                tempfile.TemporaryDirectory(prefix="verglas-ptx-") as ahead_dir:
            launched = _launched(program)
            for run in ("cold", "warm", "first call, cold", "first call, cold, helper"):
                if run.startswith("first call") and launched is None:
                    continue
                r = (_probe(program, ahead_dir, launched, ahead=True) if run.endswith("helper")
                     else _probe(program, first_dir, launched) if run.startswith("first")
                     else _probe(program, cache_dir))
                results.append({"program": program, "run": run, **r})
                if "error" in r:
                    rows.append([program, run, r["error"], "-", "-", "-", "-"])
                    continue
                rows.append([program, run, str(r["kernels"]), f"{r['import_verglas']:.2f} s",
                             f"{r['program']:.2f} s", f"{r['import_numba_cuda']:.2f} s",
                             f"{r['kernels_s']:.2f} s"])
    headers = ["program", "run", "kernels", "import verglas", "graph, Program, host code",
               "import numba.cuda", "compile_ptx (or cache)"]
    print(report.table(headers, rows))
    if args.json:
        record = {**report.header("cpu"), "results": results,
                  "device": "none: PTX for sm_90 compiled on the CPU"}
        report.write_table(
            "cuda-ptx", record, "CUDA kernels to PTX: compile time (no GPU)",
            "Per program, two fresh processes on one new cache directory: cold (every kernel "
            "the generator emits compiled by numba.cuda's compile_ptx) then warm (all from the "
            "on-disk cache); then, on another new cache directory, only the kernels a first "
            "call launches (found by running the program once under numba's CUDA simulator): "
            "what a GPU's first call compiles; then the same with a helper process compiling "
            "every kernel ahead in program order (cache.Ahead, as the runtime's first call), "
            "timed until the launched ones are loaded.",
            headers, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
