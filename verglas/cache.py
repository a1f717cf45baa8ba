"""The on-disk cache every backend stores into: one directory per backend, one entry per key.

Layout: `<cache dir>/<backend>/<key>/`. `compile()` keys an entry on the graph's fingerprint,
the mode and the backend, and stores there `function.pkl` (the optimized graph and its
Program, so a second process skips the rewrites and the scheduling) and `inputs.pkl` (the
input types, all a warm start needs of them); a backend adds its own files, in that entry or
in entries of its own (the CPU backend: `program.py`, `globals.pkl`, `runner.pkl`,
`fastcall-<digest>.py` and numba's `__pycache__`; the CUDA backend: `ptx/<kernel key>.ptx`).
Generated Python is loaded through bytecode stored beside it (`*.code`). The directory is
`verglas.config.cache_dir` (`$VERGLAS_CACHE_DIR`, else `~/.cache/verglas`).

Trust: the directory is created 0700, and one not owned by the user or writable by group or
others is refused (a warning; programs then compile in memory and nothing is read from it or
written to it). Pickles, marshalled code and PTX are stored behind a one-line header holding
the sha256 of the payload: a file whose digest does not match is treated as absent, removed
and written again. Writes are atomic (a temporary file renamed, header and payload in one
file), so processes sharing the directory never read half a file.

Size: the least recently used entries are evicted first when the directory outgrows
`config.cache_max_bytes`. A hit touches its entry directory (its mtime is its last use); a
process that stores an entry adds its size to a running total kept in `<cache dir>/.usage`,
and walks the directory to evict (down to 90% of the limit) only when that total passes the
limit. `python -m verglas cache info|clear|prune` shows, empties and prunes it.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import marshal
import os
import pickle
import shutil
import stat
import tempfile
import uuid
import warnings
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import numpy as np

from verglas.config import config
from verglas.logger import logger

__all__ = ["cache_dir", "entry_dir", "cache_key", "load_pickle", "read_pickle", "store_pickle",
           "write_atomic", "write_verified", "read_verified", "code_of", "check_dir", "usable",
           "CacheWarning", "Entry", "entries", "prune", "clear", "record", "miss_reason",
           "versions"]

FORMAT_VERSION = "2"
HEADER = f"verglas-cache/{FORMAT_VERSION} ".encode()  # then the payload's sha256, the writer
GRAPH_CHARS = 24  # a key: 24 hex digits of what was compiled, then 16 of the versions
PRUNE_TO = 0.9  # an automatic prune leaves this share of the limit (not one per store)


class CacheWarning(UserWarning):
    """The cache directory is refused: programs compile in memory."""


def cache_dir() -> Path:
    """The root cache directory: `config.cache_dir` (VERGLAS_CACHE_DIR, else the default)."""
    return config.cache_dir


# -- trust --------------------------------------------------------------------------------------
def _uid() -> int:
    """The user the directory must belong to (a function: tests stand in another user)."""
    return os.getuid()


def check_dir(path: Path | None = None, create: bool = True) -> str | None:
    """Why the cache directory `path` (the configured one) cannot be trusted, or None. A
    missing one is created 0700 (`create`), its missing parents as the OS makes them."""
    path = cache_dir() if path is None else Path(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if not create:
            return "it does not exist"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            os.makedirs(path, mode=0o700, exist_ok=True)
            st = os.stat(path)
        except OSError as exc:
            return f"it cannot be created ({exc.strerror or exc})"
    except OSError as exc:
        return f"it cannot be read ({exc.strerror or exc})"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a directory"
    if not hasattr(os, "getuid"):  # pragma: no cover - Windows: ACLs, not mode bits
        return None
    if st.st_uid != _uid():
        return f"it is owned by uid {st.st_uid}, not by this user (uid {_uid()})"
    if st.st_mode & 0o022:
        who = " and ".join(w for bit, w in ((0o020, "group"), (0o002, "others"))
                           if st.st_mode & bit)
        return f"it is writable by {who} (mode {stat.S_IMODE(st.st_mode):04o})"
    if not os.access(path, os.W_OK | os.X_OK):  # (entries could be read, never stored)
        return "this user cannot write to it"
    return None


_warned: set[tuple[str, str]] = set()


def usable() -> Path | None:
    """The cache directory, or None where it is refused (warned once per directory and
    reason): then nothing is loaded from it or stored in it."""
    root = cache_dir()
    reason = check_dir(root)
    if reason is None:
        return root
    if (str(root), reason) not in _warned:
        _warned.add((str(root), reason))
        message = (f"verglas: the cache directory {root} is not used: {reason}. Programs "
                   f"compile in memory; fix it (chmod 700, or a directory of your own in "
                   f"VERGLAS_CACHE_DIR) to cache them")
        logger.warning(message)
        warnings.warn(message, CacheWarning, stacklevel=3)
    return None


# -- keys ------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def source_digest() -> str:
    """A digest of verglas's own source: any change to the compiler invalidates the cache."""
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def _digest(*parts) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(str(part).encode())
        h.update(b"\0")
    return h.hexdigest()


def cache_key(*parts: str) -> str:
    """A digest of the parts, then one of the package versions, verglas's source and the cache
    format: entries of one program written by other versions share the key's first part."""
    return (_digest(*parts)[:GRAPH_CHARS]
            + _digest(FORMAT_VERSION, source_digest(), _version("numba"), np.__version__)[:16])


@functools.cache
def _version(dist: str) -> str:
    """A distribution's version (from its metadata: the reference backend never imports numba)."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "-"


@functools.cache
def versions() -> str:
    """What wrote an entry: verglas (and its source), numba and numpy versions."""
    return (f"verglas {_version('verglas')} (source {source_digest()[:12]}), numba "
            f"{_version('numba')}, numpy {np.__version__}")


def entry_dir(backend: str, key: str) -> Path:
    """The directory of entry `key` of `backend` (the name it is registered under)."""
    return cache_dir() / backend / key


# -- files ---------------------------------------------------------------------------------------
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


def write_verified(path: Path, payload: bytes) -> None:
    """Store `payload` behind a header with its sha256 and writer (one file: still atomic)."""
    head = HEADER + hashlib.sha256(payload).hexdigest().encode() + b" " + versions().encode()
    write_atomic(path, head + b"\n" + payload)


def read_verified(path: Path) -> tuple[bytes | None, str | None]:
    """(payload, None) when `path` holds one whose digest matches (its entry's directory is
    then touched: its last use); else (None, why), a damaged file removed."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return None, "no entry"
    except OSError as exc:
        return None, f"unreadable entry ({path.name}: {exc.strerror or exc})"
    head, newline, payload = data.partition(b"\n")
    fields = head[len(HEADER):].split(b" ", 1)
    if head.startswith(HEADER) and newline and \
            fields[0] == hashlib.sha256(payload).hexdigest().encode():
        try:
            os.utime(Path(path).parent)
        except OSError:
            pass
        return payload, None
    why = f"corrupt entry (digest mismatch in {Path(path).name}: removed)"
    try:
        os.unlink(path)
    except OSError:
        pass
    return None, why


def store_pickle(path: Path, obj) -> None:
    """Pickle `obj` into `path` behind a digest (see write_verified)."""
    write_verified(path, pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


def read_pickle(path: Path) -> tuple[object, str | None]:
    """(the unpickled object, None), or (None, why it is absent): no file, a digest mismatch
    (the file is removed), or a payload this verglas cannot unpickle."""
    payload, why = read_verified(path)
    if payload is None:
        return None, why
    try:
        return pickle.loads(payload), None
    except (EOFError, pickle.UnpicklingError, AttributeError, ImportError, TypeError,
            ValueError, IndexError) as exc:
        return None, f"unreadable entry ({Path(path).name}: {type(exc).__name__})"


def load_pickle(path: Path):
    """The unpickled object, or None when absent, damaged or unreadable."""
    return read_pickle(path)[0]


def code_of(path: Path):
    """The code object of the Python source at `path`, through bytecode stored beside it
    (`<stem>.code`, verified: this interpreter's magic number, the source's digest, the
    marshalled code, compiled for this path). Python's own .pyc cache is not used: it is off under
    PYTHONDONTWRITEBYTECODE, and a large generated module takes tens of ms to compile."""
    source = path.read_bytes()
    head = importlib.util.MAGIC_NUMBER + hashlib.sha256(source).digest()
    stored = path.with_name(path.stem + ".code")
    payload, _ = read_verified(stored)
    if payload is not None and payload.startswith(head):
        try:
            code = marshal.loads(payload[len(head):])
        except (EOFError, ValueError, TypeError):
            code = None
        # (compiled for this very path: a copied or moved entry would send numba, which finds
        # its cache files through the code's file name, to the entry it came from)
        if getattr(code, "co_filename", None) == str(path):
            return code
    code = compile(source, str(path), "exec")
    write_verified(stored, head + marshal.dumps(code))
    return code


def _writer(path: Path) -> str | None:
    """Who wrote the verified file `path` (its header), without reading the rest."""
    try:
        with open(path, "rb") as fh:
            head = fh.readline(1024)
    except OSError:
        return None
    fields = head.rstrip(b"\n").split(b" ", 2)
    return fields[2].decode(errors="replace") if len(fields) == 3 else None


def miss_reason(backend: str, key: str) -> str:
    """Why entry `key` of `backend` is absent: a new program, or one whose entries were all
    written by other versions (named where their files say)."""
    try:
        names = os.listdir(cache_dir() / backend)
    except OSError:
        names = []
    prefix = key[:GRAPH_CHARS]
    for name in sorted(names):
        if len(name) == len(key) and name.startswith(prefix) and name != key:
            writer = _writer(cache_dir() / backend / name / "function.pkl")
            return (f"no entry for these versions: this program's entry was written by "
                    f"{writer or 'another version'}, this is {versions()}")
    return "no entry: a new program"


# -- entries and size --------------------------------------------------------------------------
@dataclass(frozen=True)
class Entry:
    """One entry directory: its backend, its bytes (files in it, recursively), its last use."""

    path: Path
    backend: str
    bytes: int
    used: float


def _du(path) -> int:
    total = 0
    try:
        with os.scandir(path) as it:
            for item in it:
                try:
                    if item.is_dir(follow_symlinks=False):
                        total += _du(item.path)
                    else:
                        total += item.stat(follow_symlinks=False).st_size
                except OSError:  # (removed meanwhile)
                    continue
    except OSError:
        pass
    return total


def entries(root: Path | None = None) -> list[Entry]:
    """Every entry directory under `root` (the cache directory)."""
    root = cache_dir() if root is None else Path(root)
    found = []
    try:
        backends = [b for b in os.scandir(root)
                    if b.is_dir(follow_symlinks=False) and not b.name.startswith(".")]
    except OSError:
        return []
    for backend in backends:
        try:
            with os.scandir(backend.path) as it:
                items = [e for e in it if e.is_dir(follow_symlinks=False)]
        except OSError:
            continue
        for item in items:
            try:
                used = item.stat(follow_symlinks=False).st_mtime
            except OSError:
                continue
            found.append(Entry(Path(item.path), backend.name, _du(item.path), used))
    return found


def _remove(path: Path, root: Path) -> bool:
    """Remove an entry directory: renamed away first (atomic), so no process finds half of it."""
    trash = root / f".trash-{uuid.uuid4().hex[:12]}"
    try:
        os.rename(path, trash)
    except OSError:
        return False
    shutil.rmtree(trash, ignore_errors=True)
    return True


def _sweep(root: Path) -> None:
    """Remove what an interrupted removal left behind."""
    try:
        leftovers = [p for p in root.iterdir() if p.name.startswith(".trash-")]
    except OSError:
        return
    for path in leftovers:
        shutil.rmtree(path, ignore_errors=True)


def _read_usage(root: Path) -> int | None:
    try:
        return int((root / ".usage").read_text().strip())
    except (OSError, ValueError):
        return None


def _write_usage(root: Path, total: int) -> None:
    try:
        write_atomic(root / ".usage", f"{max(total, 0)}\n".encode())
    except OSError:
        pass


def prune(max_bytes: int | None = None, keep: str | None = None,
          root: Path | None = None) -> list[Entry]:
    """Remove least recently used entries until the directory holds at most `max_bytes`
    (`config.cache_max_bytes`), sparing those whose names start with `keep`; the removed ones.
    """
    root = cache_dir() if root is None else Path(root)
    limit = config.cache_max_bytes if max_bytes is None else max_bytes
    found = entries(root)
    total = sum(e.bytes for e in found)
    removed = []
    for entry in sorted(found, key=lambda e: e.used):
        if total <= limit:
            break
        if keep and entry.path.name.startswith(keep):
            continue
        if _remove(entry.path, root):
            total -= entry.bytes
            removed.append(entry)
    _sweep(root)
    _write_usage(root, total)
    return removed


def clear(root: Path | None = None) -> list[Entry]:
    """Remove every entry; the removed ones."""
    root = cache_dir() if root is None else Path(root)
    removed = [e for e in entries(root) if _remove(e.path, root)]
    _sweep(root)
    _write_usage(root, 0)
    return removed


def _named(backend: str, key: str) -> list[Path]:
    """The entry directories of `backend` whose names start with `key` (a program's entry and
    the entries its backend made of it)."""
    directory = cache_dir() / backend
    try:
        return [directory / n for n in os.listdir(directory) if n.startswith(key)]
    except OSError:
        return []


def record(backend: str, key: str, nbytes: int | None = None) -> None:
    """Count what was just stored (entry `key` of `backend` and the entries named after it, or
    `nbytes`) into the running total, and prune least recently used entries when it passes
    `config.cache_max_bytes` (sparing `key`'s)."""
    root = cache_dir()
    limit = config.cache_max_bytes
    if nbytes is None:
        nbytes = sum(_du(p) for p in _named(backend, key))
    total = _read_usage(root)
    total = sum(e.bytes for e in entries(root)) if total is None else total + nbytes
    if total <= limit:
        _write_usage(root, total)
        return
    removed = prune(int(limit * PRUNE_TO), keep=key, root=root)
    if removed:
        logger.info("cache: %d least recently used entries (%d bytes) removed: the directory "
                    "passed its limit of %d bytes", len(removed), sum(e.bytes for e in removed),
                    limit)
