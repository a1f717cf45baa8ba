"""The differential fuzzer's command: random programs against numpy, per configuration.

    python -m benchmarks.fuzz --programs 5000 --device cpu --json
    python -m benchmarks.fuzz --programs 1000 --device cuda --json      # numba's CUDA simulator
    python -m benchmarks.fuzz --configs fast_run --seed-start 20000 --programs 300

Programs come from tests/fuzz (generate.py: seeded, so a seed names a program) and are judged
by tests/fuzz/check.py. Each configuration runs in worker processes of its own (its
environment set before verglas is imported: VERGLAS_THREADS=0, NUMBA_ENABLE_CUDASIM=1), so a
program that kills the interpreter is recorded as a crash of its seed, not the end of the run.
Failures are minimized (tests/fuzz/minimize.py) and recorded with their seed and the
minimized program's source: `--json` writes `benchmarks/results/<name>-<date>.json` and `.md`.
The exit status is 1 when any program failed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import report

ROOT = Path(__file__).resolve().parent.parent
CPU_CONFIGS = ("reference", "fast_run", "fast_compile", "general", "threads0")
CUDA_CONFIGS = ("cuda_sim",)
CHUNK = 200  # seeds per worker process


def _config(name: str):
    from tests.fuzz.check import CONFIGS

    return CONFIGS[name]


def _env(config: str, cache: str) -> dict:
    env = dict(os.environ)
    env.update(dict(_config(config).env))
    env["VERGLAS_CACHE_DIR"] = cache
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep)
    return env


# -- workers (one process each) ------------------------------------------------------------------
def _worker(config: str, start: int, stop: int, small: bool) -> None:
    """Run seeds [start, stop) and print one JSON line before and after each."""
    import numpy as np

    from tests.fuzz.check import check
    from tests.fuzz.generate import generate

    np.seterr(all="ignore")
    cfg = _config(config)
    for seed in range(start, stop):
        print(json.dumps({"start": seed}), flush=True)
        t0 = time.perf_counter()
        program = generate(seed, small=small)
        outcome = check(program, cfg)
        print(json.dumps({"seed": seed, "status": outcome.status,
                          "signature": outcome.signature, "detail": outcome.detail[:4000],
                          "seconds": time.perf_counter() - t0}), flush=True)


def _minimize_worker(config: str, seed: int, signature: str, small: bool) -> None:
    from tests.fuzz.check import check
    from tests.fuzz.generate import generate
    from tests.fuzz.minimize import minimize

    cfg = _config(config)
    program = minimize(generate(seed, small=small), cfg, signature)
    outcome = check(program, cfg)
    print(json.dumps({"seed": seed, "program": str(program), "status": outcome.status,
                      "detail": outcome.detail[:4000]}), flush=True)


# -- the driver ----------------------------------------------------------------------------------
def _run_range(config: str, start: int, stop: int, cache: str, small: bool, log) -> list:
    """Results of seeds [start, stop), restarting the worker after a process crash."""
    results = []
    seed = start
    while seed < stop:
        cmd = [sys.executable, "-m", "benchmarks.fuzz", "--worker", config, str(seed), str(stop)]
        if small:
            cmd.append("--small")
        proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(config, cache), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        started = None
        for line in proc.stdout:
            try:
                msg = json.loads(line)
            except json.JSONDecodeError:
                continue
            if "start" in msg:
                started = msg["start"]
                continue
            results.append(msg)
            log(msg)
            seed = msg["seed"] + 1
            started = None
        err = proc.stderr.read()
        proc.wait()
        if started is not None:  # the process died inside a program
            msg = {"seed": started, "status": "crash", "signature": "crash: process died",
                   "detail": f"the process exited with {proc.returncode} running seed "
                             f"{started}\n{err[-2000:]}", "seconds": None}
            results.append(msg)
            log(msg)
            seed = started + 1
        elif proc.returncode != 0 and seed < stop:
            raise RuntimeError(f"fuzz worker for {config} failed:\n{err[-4000:]}")
    return results


def _minimized(config: str, failure: dict, cache: str, small: bool) -> dict:
    cmd = [sys.executable, "-m", "benchmarks.fuzz", "--minimize-seed", config,
           str(failure["seed"]), failure["signature"]]
    if small:
        cmd.append("--small")
    done = subprocess.run(cmd, cwd=ROOT, env=_env(config, cache), capture_output=True,
                          text=True, timeout=1800)
    for line in done.stdout.splitlines()[::-1]:
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            continue
    return {"seed": failure["seed"], "program": None,
            "detail": f"minimizing failed: {done.stderr[-1000:]}"}


def run_config(config: str, seeds: range, jobs: int, small: bool, minimize: int,
               progress: bool, max_seconds: float | None = None) -> dict:
    """Run `seeds` under `config` in `jobs` parallel workers; counts, failures, time. Past
    `max_seconds` no new chunk starts: the seeds run are then a prefix of `seeds`."""
    from concurrent.futures import ThreadPoolExecutor

    cache = tempfile.mkdtemp(prefix=f"verglas-fuzz-{config}-")
    done = [0]
    t0 = time.perf_counter()

    def log(msg):
        done[0] += 1
        if progress and (done[0] % 50 == 0 or msg["status"] != "ok"):
            mark = "" if msg["status"] == "ok" else f"  seed {msg['seed']}: {msg['signature']}"
            print(f"  {config}: {done[0]}/{len(seeds)} in {time.perf_counter() - t0:.0f} s"
                  f"{mark}", file=sys.stderr, flush=True)

    try:
        # chunks of seeds, each in a fresh worker process: numba keeps every compiled program's
        # machine code, ~5 MB a program, so one process for thousands of programs runs out of
        # memory. At least three chunks per job: every worker busy, and a time limit reached soon
        # after it passes.
        size = max(1, min(CHUNK, -(-len(seeds) // (3 * jobs))))
        chunks = [(a, min(a + size, seeds.stop)) for a in range(seeds.start, seeds.stop, size)]
        with ThreadPoolExecutor(jobs) as pool:
            parts = list(pool.map(lambda c: [] if max_seconds is not None and
                                  time.perf_counter() - t0 > max_seconds else
                                  _run_range(config, c[0], c[1], cache, small, log), chunks))
        results = sorted((r for part in parts for r in part), key=lambda r: r["seed"])
        seconds = time.perf_counter() - t0
        failures = [r for r in results if r["status"] != "ok"]
        for failure in failures[:minimize]:
            failure["minimized"] = _minimized(config, failure, cache, small)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    counts = {}
    for r in results:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    return {"config": config, "seeds": [seeds.start, seeds.start + len(results)],
            "stopped_at_time_limit": len(results) < len(seeds), "programs": len(results),
            "counts": counts, "seconds": seconds, "failures": failures}


def _commit() -> str:
    """The checkout's commit (a seed names a program of this generator), '+' if modified."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                              capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=ROOT, capture_output=True, text=True).stdout.strip()
        return head + ("+" if dirty else "")
    except OSError:
        return "unknown"


def _markdown(record: dict) -> str:
    rows = []
    for r in record["results"]:
        c = r["counts"]
        rows.append([r["config"], str(r["programs"]), str(c.get("ok", 0)),
                     str(c.get("mismatch", 0)), str(c.get("raised", 0)), str(c.get("crash", 0)),
                     str(c.get("unsafe", 0)), f"{r['seeds'][0]}-{r['seeds'][1] - 1}",
                     f"{r['seconds']:.0f} s"])
    lines = [f"# Differential fuzzing against numpy ({record['device']})", "",
             report.describe(record), f"- commit: {record['commit']} (the generator a seed "
             f"names)", "",
             report.table(["configuration", "programs", "ok", "mismatch", "raised", "crash",
                           "unsafe", "seeds", "time"], rows, markdown=True), ""]
    lines += [f"- {r['config']}: {_config(r['config']).what}"
              + (" (stopped at --max-minutes)" if r.get("stopped_at_time_limit") else "")
              for r in record["results"]]
    for r in record["results"]:
        for f in r["failures"]:
            lines += ["", f"## {r['config']}, seed {f['seed']}: {f['signature']}", "",
                      "```", f["detail"][:1500], "```"]
            program = (f.get("minimized") or {}).get("program")
            if program:
                lines += ["", "Minimized:", "", "```python", program[:3000], "```"]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fuzz", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--programs", type=int, default=200, help="programs per configuration")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="cpu: the CPU configurations; cuda: the CUDA backend under "
                             "numba's simulator")
    parser.add_argument("--configs", help="comma-separated configurations (default: all of "
                                          "the device's)")
    parser.add_argument("--seed-start", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=max(1, min(2, os.cpu_count() or 1)),
                        help="worker processes per configuration")
    parser.add_argument("--minimize", type=int, default=10,
                        help="failures to minimize per configuration")
    parser.add_argument("--small", action="store_true",
                        help="small arrays only (the simulator runs a thread per element)")
    parser.add_argument("--max-minutes", type=float, default=None,
                        help="start no new chunk of seeds after this long (per configuration); "
                             "the record counts the programs that ran")
    parser.add_argument("--json", action="store_true", help="record under benchmarks/results")
    parser.add_argument("--name", default=None, help="record name (default fuzz-<device>)")
    parser.add_argument("--worker", nargs=3, metavar=("CONFIG", "START", "STOP"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--minimize-seed", nargs=3, metavar=("CONFIG", "SEED", "SIGNATURE"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        config, start, stop = args.worker
        _worker(config, int(start), int(stop), args.small)
        return 0
    if args.minimize_seed:
        config, seed, signature = args.minimize_seed
        _minimize_worker(config, int(seed), signature, args.small)
        return 0
    configs = args.configs.split(",") if args.configs else list(
        CPU_CONFIGS if args.device == "cpu" else CUDA_CONFIGS)
    small = args.small or args.device == "cuda"
    seeds = range(args.seed_start, args.seed_start + args.programs)
    record = report.header(args.device)
    if args.device == "cuda" and configs == ["cuda_sim"]:
        record["device"] = "cuda (numba's CUDA simulator)"
    record.update({"programs_per_config": args.programs, "small": small, "results": [],
                   "commit": _commit()})
    failed = False
    for config in configs:
        print(f"{config}: {len(seeds)} programs, seeds {seeds.start}-{seeds.stop - 1}",
              file=sys.stderr, flush=True)
        result = run_config(config, seeds, args.jobs, small, args.minimize, progress=True,
                            max_seconds=None if args.max_minutes is None
                            else 60 * args.max_minutes)
        record["results"].append(result)
        failed |= bool(result["failures"])
        c = result["counts"]
        print(f"{config}: {c} in {result['seconds']:.0f} s", file=sys.stderr, flush=True)
    markdown = _markdown(record)
    print(markdown)
    if args.json:
        paths = report.write(args.name or f"fuzz-{args.device}", record, markdown)
        print(f"recorded {paths[0]} and {paths[1]}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
