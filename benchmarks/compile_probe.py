"""Compile time of one program in a fresh process: `python -m benchmarks.compile_probe`.

Prints one JSON line: `startup_s` (compiling and calling a tiny function first, so one-time
start-up such as numba's is reported apart), `compile_s` (from the compile call to a callable,
imports and graph building excluded) and `first_call_s` (the first call of the program, where
JAX traces and compiles and lazy linkers finish). `--cache DIR` points every framework's
on-disk cache at DIR (empty: a cold compile; filled by a previous probe: a warm one).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback


def _point_caches(cache: str) -> None:
    """Send verglas', numba's, PyTensor's (and later JAX's) caches to `cache`."""
    os.environ["VERGLAS_CACHE_DIR"] = os.path.join(cache, "verglas")
    os.environ["NUMBA_CACHE_DIR"] = os.path.join(cache, "numba")
    flag = f"base_compiledir={os.path.join(cache, 'pytensor')}"
    old = os.environ.get("PYTENSOR_FLAGS")
    os.environ["PYTENSOR_FLAGS"] = f"{old},{flag}" if old else flag


def _jax_cache(cache: str) -> None:
    """Turn on JAX's persistent compilation cache in `cache`, for every entry."""
    import jax
    jax.config.update("jax_compilation_cache_dir", os.path.join(cache, "jax"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def _timed_compile(fw, case) -> tuple[float, float]:
    """(compile seconds, first-call seconds) of `case` under `fw`."""
    arrays = case.make_inputs()
    thunk = fw.prepare(case, arrays)
    t0 = time.perf_counter()
    runner = thunk()
    t1 = time.perf_counter()
    fw.sync(runner())
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1


def probe(program: str, framework: str, device: str, quick: bool, cache: str | None) -> dict:
    """Measure one (program, framework) compile; errors become an `error` field."""
    if cache:
        _point_caches(cache)
    from benchmarks import peers, programs

    out: dict = {"program": program, "framework": framework, "pid": os.getpid()}
    try:
        fw = {f.name: f for f in peers.frameworks(device)}[framework]
        try:
            reason = fw.unavailable()
        except Exception as exc:  # noqa: BLE001 -- a broken import is "unavailable" too
            reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        if reason:
            return {**out, "unavailable": reason}
        if cache and framework == "jax":
            _jax_cache(cache)
        tiny = programs.PROGRAMS["call_overhead"](device, quick)[0]
        out["startup_s"] = sum(_timed_compile(fw, tiny))
        case = programs.compile_case(program, device, quick)
        out["case"] = case.label
        out["compile_s"], out["first_call_s"] = _timed_compile(fw, case)
        out["total_s"] = out["compile_s"] + out["first_call_s"]
    except Exception as exc:  # noqa: BLE001 -- report, never crash the suite
        out["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        out["traceback"] = traceback.format_exc(limit=8)
    return out


def main(argv: list[str] | None = None) -> int:
    """CLI: program, framework, --device, --quick, --cache."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.compile_probe", description=__doc__)
    p.add_argument("program")
    p.add_argument("framework", help="verglas, pt_numba, pt_c, jax (cpu); verglas, jax (cuda)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--cache", help="cache directory for every framework")
    a = p.parse_args(argv)
    result = probe(a.program, a.framework, a.device, a.quick, a.cache)
    sys.stdout.flush()
    print("\n" + json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
