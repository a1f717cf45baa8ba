"""Random programs against numpy in every CPU configuration (see generate.py and check.py).

CI runs `VERGLAS_FUZZ_PROGRAMS` programs per configuration (default below); long runs go
through `python -m benchmarks.fuzz` and are recorded under benchmarks/results. A failure
prints its seed and the minimized program: `generate(seed)` rebuilds it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.fuzz.check import CONFIGS, check
from tests.fuzz.generate import generate
from tests.fuzz.minimize import minimize

PROGRAMS = int(os.environ.get("VERGLAS_FUZZ_PROGRAMS", "150"))  # (CI: ~15 min in all)
SEED_START = int(os.environ.get("VERGLAS_FUZZ_SEED", "0"))
CHUNK = 50  # seeds per test: parallel test workers share the load
ROOT = Path(__file__).resolve().parents[2]


def _report(config, failures) -> str:
    seed, outcome = failures[0]
    small = minimize(generate(seed), config, outcome.signature, budget=60)
    seeds = ", ".join(f"{s} ({o.signature})" for s, o in failures[:20])
    return (f"{len(failures)} programs failed in {config.name}: {seeds}\n"
            f"first failure, seed {seed}: {outcome.detail[:2000]}\nminimized:\n{small}")


# "general" runs the specialized program (fast_run) and then the general one on each program
@pytest.mark.parametrize("start", range(SEED_START, SEED_START + PROGRAMS, CHUNK))
@pytest.mark.parametrize("name", ["reference", "general", "fast_compile"])
def test_random_programs_match_numpy(name, start):
    np.seterr(all="ignore")
    config = CONFIGS[name]
    failures = []
    for seed in range(start, min(start + CHUNK, SEED_START + PROGRAMS)):
        outcome = check(generate(seed), config)
        if not outcome.ok:
            failures.append((seed, outcome))
    assert not failures, _report(config, failures)


def test_random_programs_single_threaded():
    """VERGLAS_THREADS=0 is read when verglas starts: the command runs it in processes of its
    own (and reports a failing seed's minimized program)."""
    programs = PROGRAMS
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.fuzz", "--configs", "threads0", "--programs",
         str(programs), "--seed-start", str(SEED_START), "--minimize", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=3600)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert f"| threads0 | {programs} | {programs} |" in done.stdout, done.stdout[-3000:]


def test_generator_is_deterministic_and_covers_the_api():
    """A seed names a program; a few hundred seeds use every public function family."""
    import verglas as vg

    assert str(generate(123)) == str(generate(123))
    methods, names = set(), set()
    for seed in range(400):
        for node in generate(seed).nodes:
            methods.add(node.method)
            names.add(node.kwargs.get("name") or node.kwargs.get("kind"))
            if node.kwargs.get("until"):  # a loop with a stopping condition
                names.add("until")
    assert {"unary", "binary", "where", "clip", "cast", "like", "reduce", "cumsum", "nn",
            "matmul", "dot", "reshape", "transpose", "expand_dims", "squeeze", "broadcast_to",
            "concatenate", "stack", "getitem", "update", "const", "ofg", "scan_map",
            "scan_acc"} <= methods
    functions = {n for n in vg.__all__ if callable(getattr(vg, n)) and n not in (
        "Function", "asnumpy", "compile", "load", "grad", "verify_grad", "dprint", "as_tensor",
        "constant", "scalar", "tensor", "OpFromGraph", "scan", "divide", "cast",
        "inc_subtensor", "set_subtensor", "matmul", "dot", "reshape", "transpose",
        "expand_dims", "squeeze", "broadcast_to", "concatenate", "stack", "where", "clip",
        "cumsum", "full", "zeros", "ones", "arange", "full_like", "zeros_like", "ones_like")}
    missing = functions - names
    assert not missing, f"functions the generator never draws: {sorted(missing)}"


def test_command_records(tmp_path):
    """The command runs, counts and writes its record (a few programs)."""
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.fuzz", "--configs", "reference", "--programs", "5",
         "--jobs", "1"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| reference | 5 | 5 | 0 | 0 | 0 | 0 | 0-4 |" in done.stdout
    _ = json
