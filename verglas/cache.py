"""The on-disk cache every backend stores into: one directory per backend, one entry per key.

Layout: `<cache dir>/<backend>/<key>/`. `compile()` keys an entry on the graph's fingerprint,
the mode and the backend, and stores there `function.pkl` (the optimized graph and its
Program, so a second process skips the rewrites and the scheduling) and `inputs.pkl` (the
input types, all a warm start needs of them); a backend adds its own files, in that entry or
in entries of its own (the CPU backend: `program.py`, `globals.pkl`, `runner.pkl`,
`fastcall-<digest>.py`; the CUDA backend: `ptx/<kernel key>.ptx`). Generated Python is loaded
through bytecode stored beside it (`*.code`). The directory is `verglas.config.cache_dir`
(`$VERGLAS_CACHE_DIR`, else `~/.cache/verglas`).

Writes are atomic (a temporary file renamed), so processes sharing the directory never read
half a file; an unreadable entry reads as absent.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import marshal
import os
import pickle
import tempfile
from importlib import metadata
from pathlib import Path

import numpy as np

from verglas.config import config

__all__ = ["cache_dir", "entry_dir", "cache_key", "load_pickle", "store_pickle", "write_atomic",
           "code_of"]

FORMAT_VERSION = "1"


def cache_dir() -> Path:
    """The root cache directory: `config.cache_dir` (VERGLAS_CACHE_DIR, else the default)."""
    return config.cache_dir


@functools.lru_cache(maxsize=1)
def source_digest() -> str:
    """A digest of verglas's own source: any change to the compiler invalidates the cache."""
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def cache_key(*parts: str) -> str:
    """A digest of the parts, the package versions, verglas's source and the cache format."""
    h = hashlib.sha256()
    for part in (FORMAT_VERSION, source_digest(), _numba_version(), np.__version__, *parts):
        h.update(str(part).encode())
        h.update(b"\0")
    return h.hexdigest()[:40]


@functools.cache
def _numba_version() -> str:
    """numba's version (read from its metadata: the reference backend never imports numba)."""
    try:
        return metadata.version("numba")
    except metadata.PackageNotFoundError:  # pragma: no cover - numba is a requirement
        return "-"


def entry_dir(backend: str, key: str) -> Path:
    """The directory of entry `key` of `backend` (the name it is registered under)."""
    return cache_dir() / backend / key


def write_atomic(path: Path, data: bytes) -> None:
    """Write via a temporary file and rename, so concurrent processes never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def store_pickle(path: Path, obj) -> None:
    write_atomic(path, pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


def load_pickle(path: Path):
    """The unpickled object, or None when absent or unreadable (a stale or partial entry)."""
    try:
        with open(path, "rb") as fh:
            return pickle.load(fh)
    except (OSError, EOFError, pickle.UnpicklingError, AttributeError, ImportError,
            ModuleNotFoundError, TypeError, ValueError):
        return None


def code_of(path: Path):
    """The code object of the Python source at `path`, through bytecode stored beside it
    (`<stem>.code`: this interpreter's magic number, the source's digest, the marshalled
    code). Python's own .pyc cache is not used: it is off under PYTHONDONTWRITEBYTECODE, and
    a large generated module takes tens of ms to compile."""
    source = path.read_bytes()
    head = importlib.util.MAGIC_NUMBER + hashlib.sha256(source).digest()
    stored = path.with_name(path.stem + ".code")
    try:
        data = stored.read_bytes()
        if data.startswith(head):
            return marshal.loads(data[len(head):])
    except (OSError, EOFError, ValueError, TypeError):
        pass
    code = compile(source, str(path), "exec")
    write_atomic(stored, head + marshal.dumps(code))
    return code
