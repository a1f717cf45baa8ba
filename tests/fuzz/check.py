"""Running a random program under one configuration and judging it against numpy.

`expect(program)` evaluates it with numpy exactly and in perturbed runs (see oracle.py);
`check(program, config)` builds it with verglas, compiles it as the configuration says, calls
it twice on fresh arguments and returns an Outcome: "ok", or what went wrong:

- "mismatch": a result differs from numpy's (dtype, shape, or a determined value: exactly for
  integers, bools, NaN positions, infinities and signed zeros; within the perturbed runs'
  spread plus a few ulps for other floats);
- "raised": verglas raised where numpy returned, or raised another kind of exception than
  numpy's (TypeError, ValueError, IndexError, OverflowError);
- "crash": an exception that is no such clear error (numba's, LLVM's, an assertion, ...);
- "unsafe": an input was modified, an output is read-only or aliases an input or another
  output, or a second call changed the first call's results.
"""

from __future__ import annotations

import dataclasses
import os
import re
import traceback
import warnings

import numpy as np

import verglas as vg
from tests.fuzz.oracle import NumpyXP
from tests.fuzz.program import Program, VerglasXP, evaluate

__all__ = ["CONFIGS", "Config", "Outcome", "Expected", "expect", "check", "CLEAR_ERRORS"]

CLEAR_ERRORS = (TypeError, ValueError, IndexError, OverflowError, ZeroDivisionError)
# perturbed runs: 8 (with 4, a loop iterating tan 635 times, whose result any ulp decides,
# agreed with numpy by chance in all of them, seed 29406)
PERTURBED_RUNS = 8
# choice runs: one fill of unspecified values everywhere, then fills in turn by place
# (oracle.NumpyXP._random_fill)
CHOICE_RUNS = 8
BASE_ULPS = 4


@dataclasses.dataclass(frozen=True)
class Config:
    name: str
    device: str = "cpu"
    mode: str = "fast_run"
    general: bool = False  # call the general (run-time broadcasting) program for every call
    env: tuple = ()  # environment the process must run with (set before verglas is imported)
    what: str = ""  # one line for the records


CONFIGS = {c.name: c for c in (
    Config("reference", mode="reference", what="the reference executor (numpy, op by op)"),
    Config("fast_run", what="CPU, fast_run, the specialized program"),
    Config("fast_compile", mode="fast_compile", what="CPU, fast_compile"),
    Config("general", general=True,
           what="CPU, fast_run: the specialized program judged, then the general (run-time "
                "broadcasting) program of the same compile"),
    Config("threads0", env=(("VERGLAS_THREADS", "0"),),
           what="CPU, fast_run, VERGLAS_THREADS=0 (row loops on one core)"),
    Config("cuda_sim", device="cuda", env=(("NUMBA_ENABLE_CUDASIM", "1"),),
           what="the CUDA backend's kernels under numba's CUDA simulator (small arrays)"),
    Config("cuda_gpu", device="cuda",
           what="the CUDA backend on a real GPU (small arrays; --configs cuda_gpu)"),
)}


@dataclasses.dataclass
class Outcome:
    status: str  # ok | mismatch | raised | crash | unsafe
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def signature(self) -> str:
        """What kind of failure this is, without the values (a minimized program must keep
        failing the same way)."""
        if self.status == "raised":
            m = re.search(r"numpy (returned|raised \w+), verglas (raised \w+|returned)",
                          self.detail)
            return f"raised: {m.group(0) if m else self.detail[:40]}"
        if self.status == "mismatch":
            m = re.search(r"(dtype|shape|values differ|two calls|part)", self.detail)
            return f"mismatch: {m.group(0) if m else ''}"
        if self.status == "crash":
            return f"crash: {self.detail.split(':')[0]}"
        return f"{self.status}: {re.sub(r'[0-9]+', 'N', self.detail)[:60]}"


@dataclasses.dataclass
class Expected:
    error: type | None
    outputs: list  # numpy's results
    runs: list  # per perturbed run: its results, or None when that run raised
    choices: list  # the same per choice run (unspecified values chosen, nothing rounded)
    run_errors: tuple = ()  # the clear errors perturbed or choice runs raised


def expect(program: Program, rewrites: bool = True) -> Expected:
    """numpy's results of `program` (or its exception), and the perturbed runs'; with
    `rewrites`, what verglas's rewrites deliberately compute more accurately (oracle.py)."""
    inputs = [inp.value for inp in program.inputs]
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            values = evaluate(program.nodes, NumpyXP(rewrites=rewrites), inputs)
        except CLEAR_ERRORS as exc:
            return Expected(type(exc), [], [], [])
        outputs = [np.asarray(values[k]) for k in program.outputs]
        runs, choices, run_errors = [], [], []
        for moves, results, n in ((True, runs, PERTURBED_RUNS), (False, choices, CHOICE_RUNS)):
            for r in range(n):
                rng = np.random.default_rng([program.seed, r])
                try:
                    values = evaluate(program.nodes, NumpyXP(rng, r, rewrites, moves), inputs)
                    results.append([np.asarray(values[k]) for k in program.outputs])
                except CLEAR_ERRORS as exc:
                    results.append(None)
                    run_errors.append(type(exc))
    return Expected(None, outputs, runs, choices, tuple(run_errors))


def build(program: Program):
    """The program's verglas inputs and outputs."""
    xp = VerglasXP()
    inputs = [vg.tensor(f"x{k}", shape=inp.static, dtype=inp.value.dtype)
              for k, inp in enumerate(program.inputs)]
    values = evaluate(program.nodes, xp, inputs)
    return inputs, [values[k] for k in program.outputs]


def _compile(program: Program, config: Config):
    inputs, outputs = build(program)
    single = len(outputs) == 1 and program.seed % 2 == 0  # both spellings of one output
    f = vg.compile(inputs, outputs[0] if single else outputs, device=config.device,
                   mode=config.mode)
    return f, single


def _use_general(f) -> None:
    """Make every call of `f` run its general (run-time broadcasting) program."""
    f._runner = f._runner.general_runner()
    f._fast = f._call_checked


def check(program: Program, config: Config, expected: Expected | None = None) -> Outcome:
    """Compile and run `program` as `config` says; judge it against numpy. The general
    configuration judges the specialized program first (it is compiled anyway)."""
    if expected is None:
        expected = expect(program, rewrites=config.mode != "reference")
    for key, value in config.env:
        if os.environ.get(key) != value:
            raise RuntimeError(f"configuration {config.name} needs {key}={value} in the "
                               f"environment before verglas is imported")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            f, single = _compile(program, config)
    except CLEAR_ERRORS as exc:
        return _raised(exc, expected, built=False)
    except Exception as exc:  # anything else is a crash, whatever numpy did
        return Outcome("crash", f"{type(exc).__name__}: {str(exc)[:2000]}\n{_short_tb()}")
    if config.general:
        outcome = _run(f, single, program, expected)
        if not outcome.ok:
            return Outcome(outcome.status, f"(the specialized program) {outcome.detail}")
        try:
            _use_general(f)
        except Exception as exc:
            return Outcome("crash", f"{type(exc).__name__}: {str(exc)[:2000]}\n{_short_tb()}")
    return _run(f, single, program, expected)


def _raised(exc, expected: Expected, built: bool) -> Outcome:
    if expected.error is not None and _same_kind(exc, expected.error):
        return Outcome("ok")
    if any(_same_kind(exc, error) for error in expected.run_errors):
        # numpy raised too once an unspecified value was chosen otherwise (seed 20846: a NaN
        # cast to 0 ends a loop a step early, and its shorter trace cannot broadcast)
        return Outcome("ok")
    if expected.error is IndexError and not built:
        # an index out of bounds is a run-time fact: verglas found another error of the
        # program (a static one) first
        return Outcome("ok")
    if expected.error in (ValueError, TypeError) and not built and isinstance(exc, IndexError):
        # set_subtensor(x[i], v) indexes x[i] on its own first, and its static index checks
        # come before numpy's check of v against x[i]'s shape (seed 28282) and before the
        # dtype rule of inc (seed 31359: float32 added into bool through index arrays that
        # cannot broadcast)
        return Outcome("ok")
    if expected.error is not None:
        return Outcome("raised", f"numpy raised {expected.error.__name__}, verglas "
                                 f"{type(exc).__name__}: {exc}")
    return Outcome("raised", f"numpy returned, verglas raised {type(exc).__name__}: "
                             f"{exc}\n{_short_tb()}")


def _run(f, single: bool, program: Program, expected: Expected) -> Outcome:
    """Call `f` twice on fresh arguments and judge what it returns."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            args = [inp.argument() for inp in program.inputs]
            copies = [_snapshot(a) for a in args]
            first = f(*args)
            first = [first] if single else list(first)
            first = [vg.asnumpy(o) for o in first]
            kept = [np.array(o, copy=True) for o in first]
            second = f(*[inp.argument() for inp in program.inputs])
    except CLEAR_ERRORS as exc:
        return _raised(exc, expected, built=True)
    except Exception as exc:  # anything else is a crash, whatever numpy did
        return Outcome("crash", f"{type(exc).__name__}: {str(exc)[:2000]}\n{_short_tb()}")
    if expected.error is not None:
        return Outcome("raised", f"numpy raised {expected.error.__name__}, verglas returned")
    for k, (arg, copy) in enumerate(zip(args, copies)):
        if not _unchanged(arg, copy):
            return Outcome("unsafe", f"input {k} was modified")
    problems = []
    for k, out in enumerate(first):
        if not isinstance(out, np.ndarray):
            problems.append(f"output {k} is a {type(out).__name__}, not an array")
            continue
        if not out.flags.writeable:
            problems.append(f"output {k} is read-only")
        for j, a in enumerate(args):
            if isinstance(a, np.ndarray) and np.shares_memory(out, a):
                problems.append(f"output {k} shares memory with input {j}")
        for j in range(k):
            if isinstance(first[j], np.ndarray) and out.size and np.shares_memory(out, first[j]):
                problems.append(f"outputs {j} and {k} share memory")
        if out.dtype == kept[k].dtype and not _same_bits(out, kept[k]):
            problems.append(f"output {k} of the first call changed during the second call")
    if problems:
        return Outcome("unsafe", "; ".join(problems))
    second = [second] if single else list(second)
    for k, (got, again) in enumerate(zip(first, second)):
        again = vg.asnumpy(again)
        if got.shape == again.shape and got.dtype == again.dtype and not _same_bits(got, again):
            return Outcome("mismatch", f"output {k}: two calls with the same inputs disagree")
    for k, got in enumerate(first):
        runs, choices = ([r[k] if r is not None else None for r in results]
                         for results in (expected.runs, expected.choices))
        problem = compare(got, expected.outputs[k], runs, choices)
        if problem:
            return Outcome("mismatch", f"output {k}: {problem}")
    return Outcome("ok")


def _same_kind(exc, numpy_error) -> bool:
    return any(isinstance(exc, base) and issubclass(numpy_error, base) for base in CLEAR_ERRORS)


def _short_tb() -> str:
    lines = traceback.format_exc().strip().splitlines()
    return "\n".join(lines[-12:])


def _snapshot(a):
    if isinstance(a, np.ndarray):
        return (np.array(a, copy=True), a.flags.writeable, a.strides)
    return a


def _unchanged(a, snap) -> bool:
    if not isinstance(a, np.ndarray):
        return True
    copy, writeable, strides = snap
    return a.flags.writeable == writeable and a.strides == strides and _same_bits(a, copy)


def _same_bits(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False
    if a.dtype.kind in "fc":
        return bool(np.all((a == b) | (np.isnan(a) & np.isnan(b))))
    return bool(np.array_equal(a, b))


# -- comparing values ------------------------------------------------------------------------
def compare(got, want, runs, choices=()) -> str | None:
    """What is wrong with `got` as numpy's `want` (None: nothing); `runs` are the perturbed
    runs' values of the same output and `choices` the choice runs' (None where a run
    raised): an element a choice run changes depends on an unspecified value."""
    got, want = np.asarray(got), np.asarray(want)
    if got.dtype != want.dtype:
        return f"dtype {got.dtype}, numpy {want.dtype}"
    if got.shape != want.shape:
        if any(r is not None and np.shape(r) != want.shape for r in (*runs, *choices)):
            return None  # (the shape itself hangs on an unspecified value or a rounding)
        return f"shape {got.shape}, numpy {want.shape}"
    if want.size == 0:
        return None
    runs, choices = ([np.asarray(r) if r is not None and np.shape(r) == want.shape else None
                      for r in results] for results in (runs, choices))
    determined = np.ones(want.shape, bool)
    for r in choices:
        determined &= _same_elements(r, want) if r is not None else False
    if want.dtype.kind == "c":
        for part in ("real", "imag"):
            problem = _compare_float(getattr(got, part), getattr(want, part),
                                     [getattr(r, part) if r is not None else None
                                      for r in runs], determined)
            if problem:
                return f"{part} part: {problem}"
        return None
    if want.dtype.kind == "f":
        return _compare_float(got, want, runs, determined)
    for r in runs:
        determined &= (r == want) if r is not None else False
    bad = determined & (got != want)
    return _report(bad, got, want) if bad.any() else None


def _same_elements(a, b) -> np.ndarray:
    """Per element: the same value, NaN for NaN, and the same sign of zero."""
    if a.dtype.kind not in "fc":
        return a == b
    same = ((a == b) & (np.signbit(a.real) == np.signbit(b.real))) | (np.isnan(a) & np.isnan(b))
    if a.dtype.kind == "c":
        same &= np.signbit(a.imag) == np.signbit(b.imag)
    return same


def _classes(x):
    """0 finite, 1 NaN, 2 +inf, 3 -inf; 4 +0.0, 5 -0.0 (zeros apart, for their sign)."""
    c = np.zeros(x.shape, np.int8)
    c[np.isnan(x)] = 1
    c[x == np.inf] = 2
    c[x == -np.inf] = 3
    c[(x == 0) & ~np.signbit(x)] = 4
    c[(x == 0) & np.signbit(x)] = 5
    return c


def _compare_float(got, want, runs, determined) -> str | None:
    want_c = _classes(want)
    got_c = _classes(got)
    determined = determined.copy()
    spread = np.zeros(want.shape, np.float64)
    w64 = want.astype(np.float64)
    for r in runs:
        if r is None:
            determined[...] = False
            continue
        rc = _classes(r)
        # a value whose zero-ness or class a perturbation changes is not determined
        determined &= (rc == want_c) | ((want_c == 0) & (rc == 0))
        with np.errstate(all="ignore"):
            d = np.abs(r.astype(np.float64) - w64)
        spread = np.maximum(spread, np.where(np.isfinite(d), d, 0.0))
    finite = want_c == 0
    class_bad = determined & ~finite & (got_c != want_c)
    with np.errstate(all="ignore"):
        tol = 4 * spread + BASE_ULPS * np.spacing(np.abs(want)).astype(np.float64)
        err = np.abs(got.astype(np.float64) - w64)
    value_bad = determined & finite & ~(err <= tol)
    bad = class_bad | value_bad
    return _report(bad, got, want) if bad.any() else None


def _report(bad, got, want) -> str:
    idx = np.argwhere(bad)
    n = len(idx)
    shown = []
    for i in idx[:4]:
        t = tuple(int(j) for j in i)
        shown.append(f"at {t}: got {got[t]!r}, numpy {want[t]!r}")
    return f"{n} of {want.size} values differ: " + "; ".join(shown)
