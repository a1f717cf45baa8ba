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
from importlib import metadata
from pathlib import Path

import numpy as np

from verglas.cache import entry_dir, read_verified, record, usable, write_verified
from verglas.cuda_backend.compat import numba_cuda

__all__ = ["ptx_key", "ptx_path", "load_ptx", "store_ptx", "entry_name", "compile_ptx"]

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
