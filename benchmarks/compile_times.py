"""Cold and warm compile times, each probe in a fresh subprocess (see compile_probe.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FRAMEWORKS = {"cpu": ["verglas", "pt_numba", "jax"], "cuda": ["verglas", "jax"]}


def run_probe(program: str, framework: str, device: str, quick: bool, cache: str,
              timeout: float = 600) -> dict:
    """One fresh `python -m benchmarks.compile_probe` process; its JSON line as a dict."""
    cmd = [sys.executable, "-m", "benchmarks.compile_probe", program, framework,
           "--device", device, "--cache", cache] + (["--quick"] if quick else [])
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                              check=False)
    except subprocess.TimeoutExpired:
        return {"program": program, "framework": framework,
                "error": f"Timeout: no result after {timeout:g} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"program": program, "framework": framework,
                "error": f"probe exited {proc.returncode}: {' | '.join(tail)}"}
    return json.loads(lines[-1])


def measure_all(programs: list[str], device: str, quick: bool,
                step: Callable[[str], None] = lambda desc: None,
                timeout: float = 300) -> list[dict]:
    """Cold then warm probes for every (program, framework); `step` reports progress."""
    results = []
    for framework in FRAMEWORKS[device]:
        for program in programs:
            with tempfile.TemporaryDirectory(prefix="verglas-bench-cache-") as cache:
                for state in ("cold", "warm"):
                    step(f"compile {state} {program} {framework}")
                    r = run_probe(program, framework, device, quick, cache, timeout)
                    results.append({**r, "state": state})
                    if "unavailable" in r or "error" in r:
                        # a warm probe cannot do better than a failed cold one
                        results.append({**r, "state": "warm"})
                        break
    return results


def rows(results: list[dict], frameworks: list[str]) -> tuple[list[str], list[list[str]]]:
    """Compile table: one row per (program, state), compile + first call per framework."""
    from benchmarks.report import fmt_ratio, fmt_time

    cells: dict[tuple, dict] = {(r["program"], r["state"], r["framework"]): r for r in results}
    keys = list(dict.fromkeys((r["program"], r["state"]) for r in results))
    peers = [f for f in frameworks if f != "verglas"]
    headers = ["compile (+first call)", *frameworks, *(f"verglas/{p}" for p in peers)]
    out = []
    for state in ("cold", "warm"):
        names = [p for p, st in keys if st == state]
        if names:
            startup = [_cell(cells.get((names[0], state, f)), "startup_s", fmt_time)
                       for f in frameworks]
            out.append([f"startup (tiny fn), {state}", *startup, *("" for _ in peers)])
        for program in names:
            got = [cells.get((program, state, f)) for f in frameworks]
            totals = [g.get("total_s") if g else None for g in got]
            out.append([f"{program}, {state}", *(_cell(g, "total_s", fmt_time) for g in got),
                        *(fmt_ratio(totals[0], totals[frameworks.index(p)]) for p in peers)])
    return headers, out


def _cell(result: dict | None, key: str, fmt) -> str:
    """A timing, `n/a` or `error: Kind` for one probe."""
    if result is None:
        return "-"
    if "unavailable" in result:
        return "n/a"
    if "error" in result:
        return "error: " + result["error"].split(":")[0]
    return fmt(result.get(key))
