"""The CUDA backend's entries in verglas's on-disk cache (verglas/cache.py): PTX keyed by
kernel fingerprint and target.

Layout: `<cache dir>/cuda/ptx/<key>.ptx`, one file per distinct kernel (kernels are shared by
every program that generates the same source), `key` a digest of the kernel source and
parameter types, the compute capability, the numba / numba-cuda / NVVM versions and the cache
format.
"""

from __future__ import annotations

import cmath
import hashlib
import math
import re
import threading
from importlib import metadata
from pathlib import Path

import numpy as np

from verglas.cache import entry_dir, read_verified, record, usable, write_verified
from verglas.compile_helper import CompileHelper, available
from verglas.cuda_backend.compat import numba_cuda

__all__ = ["ptx_key", "ptx_path", "load_ptx", "store_ptx", "entry_name", "compile_ptx", "Ahead"]

FORMAT_VERSION = "1"


def _versions() -> tuple[str, ...]:
    out = []
    for dist in ("numba", "numba-cuda", "nvidia-nvvm", "nvidia-cuda-nvcc-cu12"):
        try:
            out.append(f"{dist}={metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            out.append(f"{dist}=-")
    return tuple(out)


def ptx_key(spec, cc: tuple[int, int]) -> str:
    """The cache key of kernel `spec` compiled for compute capability `cc`."""
    h = hashlib.sha256()
    for part in (FORMAT_VERSION, spec.fingerprint, f"sm_{cc[0]}{cc[1]}", *_versions()):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:40]


def ptx_path(spec, cc) -> Path:
    return entry_dir("cuda", "ptx") / f"{ptx_key(spec, cc)}.ptx"


def load_ptx(spec, cc) -> str | None:
    """The cached PTX of `spec` for `cc` (its digest checked), or None."""
    data, _ = read_verified(ptx_path(spec, cc))
    text = data.decode(errors="replace") if data is not None else None
    return text if text and entry_name(text) else None


def store_ptx(spec, cc, ptx: str) -> None:
    write_verified(ptx_path(spec, cc), ptx.encode())
    record("cuda", "ptx", len(ptx))


def entry_name(ptx: str) -> str | None:
    """The kernel's (mangled, per-compile) entry symbol in `ptx`."""
    match = re.search(r"\.visible \.entry (\w+)\(", ptx)
    return match.group(1) if match else None


def compile_ptx(spec, cc) -> str:
    """PTX of `spec` for `cc` (from the cache, else compiled by numba.cuda and stored; neither
    where the cache directory is refused)."""
    trusted = usable() is not None
    ptx = load_ptx(spec, cc) if trusted else None
    if ptx is None:
        ptx = compile_spec(spec, cc)
        if trusted:
            store_ptx(spec, cc, ptx)
    return ptx


def compile_spec(spec, cc) -> str:
    """Compile kernel `spec` to PTX with `numba.cuda.compile_ptx` (needs NVVM, not a GPU)."""
    cuda = numba_cuda()  # optional: numba-cuda, imported here

    namespace = {"cuda": cuda, "math": math, "cmath": cmath, "np": np}
    exec(compile(spec.source, f"<verglas kernel {spec.name}>", "exec"), namespace)
    ptx, _ = cuda.compile_ptx(namespace[spec.name], spec.signature(), cc=tuple(cc))
    return ptx


class Ahead:
    """The PTX of a program's kernels, compiled by a helper process (compile_helper.py) and
    this one: numba-cuda compiles one kernel at a time (~0.1 s each), and a first call waits
    for each kernel it launches. The first kernel asked for is compiled here, which sets up
    numba-cuda (~0.3 s, once per process); the helper, forked then, inherits that and takes
    the other kernels from the program's end, storing each in the PTX cache. `ptx(spec)`
    compiles here a kernel the helper has not started, or, while the helper compiles it, the
    next kernels nobody has taken (from the program's start), then loads it."""

    def __init__(self, specs, cc):
        self.cc = cc
        self.todo: list = []  # the kernels for the helper, in its order
        self.items: dict[str, int] = {}  # fingerprint -> item, until its PTX is asked for
        self.helper = None
        self._lock = threading.Lock()
        if not available() or usable() is None:  # (the helper hands PTX on through the cache)
            return
        todo = list({s.fingerprint: s for s in specs if load_ptx(s, cc) is None}.values())
        # the helper's order: from the program's end, strided kernels last; this process asks
        # for kernels from its start as the first call launches them (they meet in between)
        todo = [todo[j] for j in sorted(range(len(todo)), key=lambda j: (_strided(todo[j]), -j))]
        if len(todo) >= 3:
            self.todo = todo
            self.helper = CompileHelper(lambda k: compile_ptx(todo[k], cc))

    def ptx(self, spec) -> str:
        """The PTX of `spec` (compile_ptx), the helper's if it has started it."""
        with self._lock:
            if self.helper is not None and self.helper.child is None and not self.items:
                ptx = compile_ptx(spec, self.cc)  # (numba-cuda set up before the fork)
                self._start(spec)
                return ptx
            k = self.items.pop(spec.fingerprint, None)
            if k is not None and not self.helper.take(k):
                while not self.helper.reported(k) and self._compile_next():
                    pass
                self.helper.wait([k])
            if not self.items and self.helper is not None:
                self.helper.close()  # (every kernel asked for: it has nothing left to do)
        return compile_ptx(spec, self.cc)

    def _start(self, first) -> None:
        """Fork the helper and hand it every kernel but `first`."""
        for k, spec in enumerate(self.todo):
            if spec.fingerprint == first.fingerprint:
                continue
            if not self.helper.send(k, k):
                break
            self.items[spec.fingerprint] = k
        if not self.items:
            self.helper.close()

    def _compile_next(self) -> bool:
        """Compile here the first kernel in program order nobody has taken (the helper's
        order is the reverse), strided ones aside (they may never run); False when there is
        none."""
        for j in range(len(self.todo) - 1, -1, -1):
            spec = self.todo[j]
            if spec.fingerprint in self.items and not _strided(spec) and self.helper.take(j):
                compile_ptx(spec, self.cc)  # (stored: its own ptx() loads it)
                return True
        return False

    def close(self) -> None:
        if self.helper is not None:
            self.helper.close()


def _strided(spec) -> bool:
    """An elementwise step's strided kernel (kind "map", by_content's name): it runs only
    where an operand is not contiguous, which a first call's inputs seldom are."""
    return spec.name.endswith("_map")
