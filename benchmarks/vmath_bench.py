"""Accuracy and speed of verglas.cpu_backend.vmath against numpy and numba's math.* loops.

    python benchmarks/vmath_bench.py [names...] [--against OLD_VMATH.py]

``--against`` loads another vmath module from a file (e.g. ``git show
HEAD~1:verglas/cpu_backend/vmath.py > /tmp/vmath_old.py``) and times its kernels interleaved
with the current ones (rounds of 10 calls each, alternating), so the two minima see the same
machine noise.  Whole-domain accuracy is tests/cpu_backend/test_vmath_domain.py's table.
"""

import importlib.util
import math
import sys
import time

import numba
import numpy as np
import scipy.special

from tests.cpu_backend.test_vmath_domain import reference
from verglas.cpu_backend.vmath import FASTMATH, VMATH

N = 10**6
FM = set(FASTMATH)

_MATH = {
    "exp": "math.exp(v)",
    "expm1": "math.expm1(v)",
    "log": "math.log(v)",
    "log1p": "math.log1p(v)",
    "sin": "math.sin(v)",
    "cos": "math.cos(v)",
    "tan": "math.tan(v)",
    "tanh": "math.tanh(v)",
    "sigmoid": "1.0 / (1.0 + math.exp(-v))",
    "softplus": "max(v, 0.0) + math.log1p(math.exp(-abs(v)))",
    "erf": "math.erf(v)",
    "pow": "v ** w",
}
_NUMPY = {
    "sigmoid": scipy.special.expit,
    "softplus": lambda x, out=None: np.logaddexp(x, 0, out=out),
    "erf": scipy.special.erf,
    "pow": np.power,
}

_TIMING_RANGE = {"log": (1e-3, 1e3), "log1p": (-0.9, 100), "pow": (0.1, 10)}


def inputs(name, dtype, rng, n):
    """Inputs spanning the interesting range of each function."""
    big = 104.0 if dtype == np.float32 else 745.0
    u = rng.uniform
    parts = {
        "exp": [u(-big, big * 0.953, n), rng.normal(0, 2, n)],
        "expm1": [u(-40, big * 0.95, n), np.sign(u(-1, 1, n)) * 10 ** u(-20, 0, n)],
        "log": [10 ** u(-300, 300, n), u(0, 3, n), np.array([5e-324, 1e-310, 2e-308])],
        "log1p": [u(-1, 1, n), 10 ** u(-20, 300, n), -(10 ** u(-20, 0, n))],
        "sin": [u(-1e5, 1e5, n), u(-10, 10, n)],
        "tanh": [u(-25, 25, n), np.sign(u(-1, 1, n)) * 10 ** u(-20, 0, n)],
        "sigmoid": [u(-big, 40, n)],
        "softplus": [u(-big, big, n), u(-5, 5, n)],
        "erf": [u(-7, 7, n), u(-1.5, 1.5, n)],
        "pow": [10 ** u(-3, 3, n)],
    }
    parts["cos"] = parts["tan"] = parts["sin"]
    x = np.concatenate(parts[name]).astype(dtype)
    return x if dtype == np.float32 or name != "log" else x


def _loop(expr, binary):
    """njit loop applying expr (in v[, w]) elementwise."""
    args = "x, y, out" if binary else "x, out"
    w = "        w = y[i]\n" if binary else ""
    src = (f"def loop({args}):\n    for i in range(x.shape[0]):\n        v = x[i]\n{w}"
           f"        out[i] = {expr}\n")
    scope = {"math": math, "f": None}
    exec(src, scope)
    return scope["loop"]


def _best(*fs, args, rounds=2, reps=10):
    """Minimum time in ms of each f(*args), the f interleaved in rounds of `reps` calls."""
    for f in fs:
        f(*args)
    ts = [[] for _ in fs]
    for _ in range(rounds):
        for f, t_f in zip(fs, ts):
            for _ in range(reps):
                t = time.perf_counter()
                f(*args)
                t_f.append(time.perf_counter() - t)
    return [min(t_f) * 1e3 for t_f in ts]


def _load(path):
    """A vmath module loaded from a file (an older version, say)."""
    spec = importlib.util.spec_from_file_location("vmath_against", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(names, against=None):
    """Print one table row per (function, dtype)."""
    rng = np.random.default_rng(0)
    old = _load(against) if against else None
    print(f"{'function':9} {'dtype':7} {'ulp':>6} {'relerr':>8} {'np ulp':>6}  "
          f"{'vmath':>6} {'numpy':>6} {'math':>6} ms  simd"
          + ("    before  ratio" if old else ""))
    for name in names:
        for dtype in (np.float32, np.float64):
            dt = np.dtype(dtype).name
            binary = name == "pow"
            fn = VMATH[(name, dt)]
            loop = _loop("f(v, w)" if binary else "f(v)", binary)
            loop.__globals__["f"] = fn
            vloop = numba.njit(fastmath=FM)(loop)
            mloop = numba.njit(fastmath=FM)(_loop(_MATH[name], binary))
            x = inputs(name, dtype, rng, 200_000 if name != "erf" else 3000)
            y = rng.uniform(-40, 40, x.size).astype(dtype) if binary else None
            if binary:
                y = np.where(np.abs(y * np.log(x.astype(float))) > (80 if dt == "float32"
                                                                   else 700), 1.5, y)
                y = y.astype(dtype)
            a = (x, y) if binary else (x,)
            out = np.empty_like(x)
            vloop(*a, out)
            ref = reference(name, x.astype(np.float64), None if y is None else y.astype(float))
            ref64 = ref.astype(np.float64)
            npf = _NUMPY[name] if name in _NUMPY else getattr(np, name)
            npres = npf(*a).astype(np.float64)
            spacing = np.abs(np.spacing(ref.astype(dtype))).astype(np.longdouble)
            finfo = np.finfo(dtype)
            ok = (np.abs(ref64) <= finfo.max) & (np.abs(ref64) >= finfo.tiny)
            err = np.abs(out.astype(np.longdouble) - ref)[ok] / spacing[ok]
            nperr = np.abs(npres.astype(np.longdouble) - ref)[ok] / spacing[ok]
            rel = (np.abs(out.astype(np.longdouble) - ref) / np.abs(ref))[ok]
            # Timing on 1e6 contiguous elements of a typical range (no overflow slow paths).
            lo, hi = _TIMING_RANGE.get(name, (-10, 10))
            xt = rng.uniform(lo, hi, N).astype(dtype)
            at = (xt, rng.uniform(-5, 5, N).astype(dtype)) if binary else (xt,)
            ot = np.empty_like(xt)
            tn, tm = _best(lambda *a: npf(*a[:-1], out=a[-1]), mloop, args=(*at, ot))
            if old is not None:
                oloop = _loop("f(v, w)" if binary else "f(v)", binary)
                oloop.__globals__["f"] = old.VMATH[(name, dt)]
                tv, to = _best(vloop, numba.njit(fastmath=FM)(oloop), args=(*at, ot), rounds=5)
            else:
                (tv,) = _best(vloop, args=(*at, ot))
            asm = vloop.inspect_asm(vloop.signatures[0])
            simd = ("zmm" if "zmm" in asm else "ymm" if "ymm" in asm else "-") + (
                " call" if "call" in asm.split("__gufunc")[0] and "call\t" in asm else "")
            extra = f"  {to:6.2f} {tv / to:6.2f}" if old is not None else ""
            print(f"{name:9} {dt:7} {err.max():6.2f} {float(rel.max()):8.1e} "
                  f"{nperr.max():6.2f}  {tv:6.2f} {tn:6.2f} {tm:6.2f}     {simd:8}{extra}",
                  flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    against = None
    if "--against" in args:
        i = args.index("--against")
        against = args[i + 1]
        del args[i:i + 2]
    main(args or list(_MATH), against)
