"""Saved Functions: one versioned, digest-checked file (`Function.save`, `verglas.load`).

A file is, in order: MAGIC (8 bytes); the format version and the header's length (two
little-endian uint32); the header (UTF-8 JSON: the format, the verglas / numba / numpy / Python
versions, the device, the inputs and outputs, the payload's length and sha256); the payload, a
pickle of the Function's class and state (the optimized graph, its Program, the input names)
and of the files its backend stored for its code. For the CPU backend those are the generated
module, its globals (large constants included) and its layout: `load` writes them back into
the local cache entry they came from, so the runner loads them with no rewrite, no scheduling
and no code generation.

numba's machine code does not travel: the first load on a machine compiles the stored source
(as a warm start from verglas's cache would) and numba's on-disk cache, kept in that entry,
serves every later load there. Machine code is specific to the CPU it was built for (an
artifact saved on an AVX-512 server may be served on an AVX2 one), numba's cache index is
stamped with its source file's path and modification time (carrying it would mean forging
numba's internals), and it is several times the size of the source.

`load` checks the magic, the format version, the length and the digest before it unpickles
anything: a damaged or truncated file is a ValueError naming the path and the fault. The digest
guards against damage, not against forgery: like any pickle, load only files you trust. Stored
code is used only where the verglas source, numba and numpy that wrote it are the ones running
(its cache key covers them); otherwise the saved graph is compiled again, with a warning (and,
when verglas itself changed, scheduled again too). A backend that stores no code (CUDA: its
kernels are generated from the Program, their PTX cached by kernel) generates it at load, and
so does any backend where verglas's cache directory is refused (see verglas/cache.py).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import pickle
import struct
import sys
import warnings
from importlib import metadata
from pathlib import Path

import numpy as np

from verglas import backend as backends
from verglas import cache

__all__ = ["MAGIC", "FORMAT_VERSION", "save", "load", "read_header"]

MAGIC = b"\x89VGLART\n"  # (the high byte and the newline catch text-mode transfers, as PNG's)
FORMAT_VERSION = 1
_PREFIX = struct.Struct("<8sII")  # magic, format version, header length
_MAX_HEADER = 1 << 20
_SKIPPED = (".code",)  # interpreter-specific bytecode, rebuilt from the source beside it


def save(path, cls: type, state: dict, code_dir: Path | None = None) -> Path:
    """Write the Function of class `cls` and pickled `state` (with the files of its backend's
    cache entry `code_dir`, if any) to `path`, atomically; return the path."""
    path = Path(path)
    device = state["device"]
    files = _entry_files(code_dir) if code_dir is not None else {}
    code = {"backend": Path(code_dir).parent.name, "entry": Path(code_dir).name,
            "files": files} if files else None
    payload = pickle.dumps({"class": cls, "state": state, "code": code},
                           protocol=pickle.HIGHEST_PROTOCOL)
    graph = state["graph"]
    header = {
        "format": FORMAT_VERSION, **_versions(),
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "device": device, "mode": state["mode"],
        "inputs": [{"name": name, "dtype": str(v.type.dtype), "shape": list(v.type.shape)}
                   for name, v in zip(state["input_names"], graph.inputs)],
        "outputs": [{"dtype": str(v.type.dtype), "shape": list(v.type.shape)}
                    for v in graph.outputs],
        "stored_code": sorted(files),
        "payload_bytes": len(payload),
        "payload_sha256": hashlib.sha256(payload).hexdigest(),
    }
    text = json.dumps(header, indent=1).encode()
    cache.write_atomic(path, _PREFIX.pack(MAGIC, FORMAT_VERSION, len(text)) + text + payload)
    return path


def _versions() -> dict:
    """What wrote the file; `code_stamp` (verglas's source, numba, numpy, the cache format:
    what the backend's cache key covers) decides whether its stored code is current here."""
    return {"verglas": sys.modules["verglas"].__version__,
            "verglas_source": cache.source_digest()[:16],
            "numba": _version("numba"), "numpy": np.__version__,
            "python": sys.version.split()[0], "code_stamp": cache.cache_key()}


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "-"


def _entry_files(directory: Path) -> dict[str, bytes]:
    """The files of a backend's cache entry that describe its code (not bytecode, not
    temporaries, not numba's machine code in subdirectories); empty if the entry is gone."""
    try:
        return {p.name: p.read_bytes() for p in sorted(Path(directory).iterdir())
                if p.is_file() and not p.name.startswith(".") and p.suffix not in _SKIPPED}
    except OSError:
        return {}


def read_header(path) -> dict:
    """The header of the artifact at `path`, once its payload's length and digest check out
    (nothing is unpickled); ValueError naming the path and the fault otherwise."""
    return _read(Path(path))[0]


def _read(path: Path) -> tuple[dict, bytes]:
    """The verified header and payload of the file at `path`."""
    data = path.read_bytes()
    if len(data) < _PREFIX.size or not data.startswith(MAGIC):
        what = "is empty" if not data else (
            f"is too short ({len(data)} bytes)" if data.startswith(MAGIC[:len(data)])
            else "does not start with verglas's artifact magic")
        raise ValueError(f"{path}: not a verglas artifact: the file {what}")
    _, version, size = _PREFIX.unpack_from(data)
    if version != FORMAT_VERSION:
        raise ValueError(f"{path}: artifact format version {version}; this verglas reads "
                         f"version {FORMAT_VERSION} (save it again with this verglas)")
    end = _PREFIX.size + size
    if size > _MAX_HEADER or end > len(data):
        raise ValueError(f"{path}: truncated or damaged: the header claims {size} bytes, "
                         f"the file has {len(data) - _PREFIX.size} after the prefix")
    try:
        header = json.loads(data[_PREFIX.size:end].decode())
        want, digest = int(header["payload_bytes"]), str(header["payload_sha256"])
        if header["format"] != FORMAT_VERSION or not isinstance(header["device"], str):
            raise ValueError("its fields contradict the file's prefix")
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{path}: damaged header ({type(exc).__name__}: {exc})") from None
    payload = data[end:]
    if len(payload) < want:
        raise ValueError(f"{path}: truncated: {len(payload)} of the payload's {want} bytes")
    if len(payload) > want:
        raise ValueError(f"{path}: damaged: {len(payload) - want} bytes after the payload")
    got = hashlib.sha256(payload).hexdigest()
    if got != digest:
        raise ValueError(f"{path}: corrupted: the payload's sha256 is {got[:16]}..., the "
                         f"header says {digest[:16]}...")
    return header, payload


def load(path):
    """Read a Function saved with `Function.save`; the code that built its graph is not needed.

    Examples
    --------
    >>> import numpy as np, tempfile, os, verglas as vg
    >>> x = vg.tensor("x", shape=(None,), dtype="float64")
    >>> path = vg.compile([x], 2 * x).save(os.path.join(tempfile.mkdtemp(), "f.vgl"))
    >>> vg.load(path)(np.arange(3.0))
    array([0., 2., 4.])
    """
    path = Path(path)
    header, payload = _read(path)
    device = header["device"]
    if device not in backends.devices():
        raise ValueError(f"{path}: saved for device {device!r}, which no backend here runs "
                         f"(devices: {', '.join(backends.devices())})")
    here = _versions()
    stale = [f"{name} {header.get(name)} (here {here[name]})"
             for name in ("verglas", "verglas_source", "numba", "numpy")
             if header.get(name) != here[name]]
    if header.get("code_stamp") != here["code_stamp"] and not stale:
        stale = [f"cache format (stamp {str(header.get('code_stamp'))[:12]})"]
    try:
        content = pickle.loads(payload)
        cls, state, code = content["class"], content["state"], content["code"]
        if not (isinstance(cls, type) and isinstance(state, dict) and "graph" in state):
            raise TypeError("the payload is not a saved Function")
    except Exception as exc:
        why = f"written by {', '.join(stale)}: " if stale else ""
        raise ValueError(f"{path}: the saved Function cannot be read here ({why}"
                         f"{type(exc).__name__}: {exc}); save it again from the code that "
                         f"built it") from None
    if stale:
        warnings.warn(f"{path}: saved with {', '.join(stale)}: its stored code is stale; "
                      f"compiling the saved graph again", stacklevel=2)
        if header.get("verglas_source") != here["verglas_source"]:
            state["program"] = None  # (scheduled again by this verglas)
    if state.get("cache_key") is None:
        pass
    elif cache.usable() is None:  # (a cache directory refused, warned: compiled in memory)
        state["cache_key"] = None
    elif stale:  # (never the key another version computed: its entries are that version's)
        state["cache_key"] = cache.cache_key(state["graph"].fingerprint(), state["mode"],
                                             device, "artifact")
    elif code is not None:
        try:
            _restore(path, code)
        except OSError as exc:  # (a cache that cannot be written: compiled in memory)
            warnings.warn(f"{path}: cannot write its stored code into verglas's cache ({exc}); "
                          f"generating it again", stacklevel=2)
            state["cache_key"] = None
    function = cls.__new__(cls)
    function.__setstate__(state)
    return function


def _restore(path: Path, code: dict) -> None:
    """Write the stored code files into their cache entry (a file already there with the same
    bytes is left alone: numba's cache beside it stays valid)."""
    names = [code["backend"], code["entry"], *code["files"]]
    if any(not isinstance(n, str) or Path(n).name != n or n.startswith(".") for n in names):
        raise ValueError(f"{path}: damaged: stored code names {names!r}")
    directory = cache.entry_dir(code["backend"], code["entry"])
    written = 0
    for name, data in code["files"].items():
        target = directory / name
        try:
            if target.read_bytes() == data:
                continue
        except OSError:
            pass
        cache.write_atomic(target, data)
        written += len(data)
    if written:
        cache.record(code["backend"], code["entry"], written)  # (its size limit counts them)
