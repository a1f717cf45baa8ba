"""`python -m verglas`: what verglas runs with (`info`) and its on-disk cache (`cache`).

    python -m verglas info                       versions, CPU, threads, BLAS, cache, CUDA
    python -m verglas cache info                 the cache directory: trusted?, entries, size
    python -m verglas cache clear                remove every entry (no question asked)
    python -m verglas cache prune [--max-bytes N]  evict least recently used entries

Output is plain text, one `key: value` per line, in groups (a group's lines indented under
its name), so it reads as YAML. A cache command on a refused directory changes nothing and
exits with status 1.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib
import os
import platform
import sys
from importlib import metadata

import numpy as np

from verglas import cache
from verglas.config import Config, config
from verglas.cpu_backend import threads
from verglas.cpu_backend.blas import numpy_cblas_gemm
from verglas.cpu_backend.intrinsics import preferred_vector_width
from verglas.logger import apply_config

__all__ = ["main"]

# the features that decide how wide generated loops vectorize
_VECTOR_FEATURES = ("sse4.2", "avx", "avx2", "fma", "avx512f", "avx512dq", "avx512bw",
                    "avx512vl", "avx512cd", "avx512vnni", "avx512bf16", "avx512fp16")


def _bytes(n: int) -> str:
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n} bytes ({n / size:.1f} {unit})"
    return f"{n} bytes"


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _group(name: str, rows) -> list[str]:
    return [f"{name}:"] + [f"  {key}: {value}" for key, value in rows]


# -- python -m verglas info ----------------------------------------------------------------------
def _versions():
    yield "python", f"{platform.python_version()} ({platform.python_implementation()}, " \
                    f"{sys.executable})"
    yield "verglas", f"{_version('verglas')} (source {cache.source_digest()[:12]})"
    for dist in ("numpy", "numba", "llvmlite", "scipy", "tbb", "numba-cuda"):
        yield dist, _version(dist)
    cupy = next((d for d in ("cupy-cuda13x", "cupy-cuda12x", "cupy-cuda11x", "cupy")
                 if _version(d) != "not installed"), None)
    yield "cupy", f"{_version(cupy)} ({cupy})" if cupy else "not installed"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cpu_features() -> tuple[str, list[str]]:
    """(where the features came from, those of _VECTOR_FEATURES the CPU has)."""
    try:
        from llvmlite import binding

        features = binding.get_host_cpu_features()
        have = {name for name, on in features.items() if on}
        return f"llvm ({binding.get_host_cpu_name()})", [f for f in _VECTOR_FEATURES if f in have]
    except Exception:  # noqa: BLE001 -- no host query: the kernel's flags
        try:
            with open("/proc/cpuinfo") as fh:
                flags = next(line for line in fh if line.startswith("flags")).split()
        except (OSError, StopIteration):
            return "unknown", []
        have = {f.replace("_", ".") if f == "sse4_2" else f.replace("_", "") for f in flags}
        return "/proc/cpuinfo", [f for f in _VECTOR_FEATURES if f in have]


def _cpu():
    yield "model", _cpu_model()
    cores = os.cpu_count()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cores
    yield "cores", f"{cores} ({usable} usable by this process)"
    source, features = _cpu_features()
    yield "vector features", f"{' '.join(features) or 'none of ' + ' '.join(_VECTOR_FEATURES)}" \
                             f" (from {source})"
    width = preferred_vector_width()
    setting = "auto" if config.vector_width is None else config.vector_width
    yield "vector width", (f"{width} bits" if width else "LLVM's choice") + \
        f" (vector_width: {setting})"


def _threads():
    import numba

    yield "numba threading layer", f"{numba.config.THREADING_LAYER} (NUMBA_THREADING_LAYER)"
    yield "numba threads", numba.config.NUMBA_NUM_THREADS
    safe = threads._safe_layer()  # (loads the environment's libtbb first, as verglas does)
    for layer in ("tbb", "omp", "workqueue"):
        try:
            importlib.import_module(f"numba.np.ufunc.{layer}pool" if layer != "workqueue"
                                    else "numba.np.ufunc.workqueue")
            yield layer, "available"
        except Exception as exc:  # noqa: BLE001 -- ImportError, or a library's OSError
            yield layer, f"unavailable ({type(exc).__name__}: {exc})"
    if not config.threads:
        rows = "serial (threads: off)"
    elif safe:
        rows = "threaded (a layer safe under concurrent calls is there)"
    else:
        rows = "serial (no threading layer safe under concurrent calls: tbb or omp)"
    yield "verglas row loops", rows


def _blas():
    products = ("numpy's CBLAS" if numpy_cblas_gemm() else "numba's gemm (scipy's BLAS)")
    yield "verglas matrix products", f"{products} (numpy_blas: {config.numpy_blas})"
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        blas = np.show_config(mode="dicts").get("Build Dependencies", {}).get("blas", {})
        yield "numpy", (f"{blas.get('name', 'unknown')} {blas.get('version', '')} (numpy's "
                        f"build; threadpoolctl is not installed: threads unknown)")
        return
    found = False
    for lib in threadpool_info():
        if lib.get("user_api") != "blas":
            continue
        path = lib.get("filepath", "")
        owner = ("numpy" if "numpy" in path else "scipy (numba's np.dot)" if "scipy" in path
                 else "other")
        found = True
        yield owner, (f"{lib.get('internal_api')} {lib.get('version')} ("
                      f"{lib.get('threading_layer')}, {lib.get('num_threads')} threads, "
                      f"{lib.get('architecture')}, {path})")
    if not found:
        yield "numpy", "no BLAS library loaded"


def _cache_rows(refused_is_fatal: bool = False):
    root = cache.cache_dir()
    yield "directory", root
    if not root.exists():
        yield "trusted", "(it does not exist yet: created 0700 at the first compile)"
        reason = None
    else:
        reason = cache.check_dir(root, create=False)
        yield "trusted", "yes" if reason is None else f"no: {reason}"
    found = cache.entries(root) if root.exists() else []
    yield "entries", len(found)
    for backend in sorted({e.backend for e in found}):
        mine = [e for e in found if e.backend == backend]
        yield f"entries {backend}", f"{len(mine)}, {_bytes(sum(e.bytes for e in mine))}"
    yield "total", _bytes(sum(e.bytes for e in found))
    yield "limit", f"{_bytes(config.cache_max_bytes)} (cache_max_bytes)"


def _cuda():
    """The CUDA driver and device, found with ctypes alone (no numba.cuda import: fast, and
    harmless without a GPU), then cupy's runtime where a device is there."""
    from numba.core import config as numba_config

    yield "simulator", ("on (NUMBA_ENABLE_CUDASIM=1: device='cuda' runs on the CPU)"
                        if numba_config.ENABLE_CUDASIM else "off")
    yield "numba-cuda", _version("numba-cuda")
    names = {"linux": ["libcuda.so.1", "libcuda.so"], "win32": ["nvcuda.dll"]}
    lib = None
    for name in names.get(sys.platform, []):
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            continue
    if lib is None:
        yield "driver", "not found (no libcuda: no NVIDIA driver on this machine)"
        return
    version, count = ctypes.c_int(0), ctypes.c_int(0)
    if lib.cuInit(0) != 0 or lib.cuDriverGetVersion(ctypes.byref(version)) != 0:
        yield "driver", "present, but cuInit failed (no usable GPU)"
        return
    yield "driver", f"CUDA {version.value // 1000}.{version.value % 1000 // 10}"
    lib.cuDeviceGetCount(ctypes.byref(count))
    yield "devices", count.value
    for k in range(count.value):
        device, name = ctypes.c_int(0), ctypes.create_string_buffer(256)
        major, minor, memory = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_size_t(0)
        lib.cuDeviceGet(ctypes.byref(device), k)
        lib.cuDeviceGetName(name, 256, device)
        lib.cuDeviceGetAttribute(ctypes.byref(major), 75, device)  # compute capability major
        lib.cuDeviceGetAttribute(ctypes.byref(minor), 76, device)  # and minor
        lib.cuDeviceTotalMem_v2(ctypes.byref(memory), device)
        yield f"device {k}", (f"{name.value.decode(errors='replace')} (sm_{major.value}"
                              f"{minor.value}, {memory.value / (1 << 30):.1f} GiB)")
    try:
        import cupy

        runtime = cupy.cuda.runtime.runtimeGetVersion()
        yield "runtime", f"CUDA {runtime // 1000}.{runtime % 1000 // 10} (cupy's)"
    except Exception as exc:  # noqa: BLE001 -- ImportError, or cupy's CUDA errors
        yield "runtime", f"cupy cannot be imported ({type(exc).__name__})"


def info() -> int:
    """Print what verglas runs with."""
    lines = []
    for name, rows in (("versions", _versions()), ("cpu", _cpu()), ("threads", _threads()),
                       ("blas", _blas()), ("cache", _cache_rows()), ("cuda", _cuda())):
        try:
            lines += _group(name, list(rows))
        except Exception as exc:  # noqa: BLE001 -- one group failing leaves the others
            lines += _group(name, [("error", f"{type(exc).__name__}: {exc}")])
    print("\n".join(lines))
    return 0


# -- python -m verglas cache ... -------------------------------------------------------------------
def _removed(removed) -> list[str]:
    lines = [f"removed: {len(removed)} entries, {_bytes(sum(e.bytes for e in removed))}"]
    for backend in sorted({e.backend for e in removed}):
        mine = [e for e in removed if e.backend == backend]
        lines.append(f"removed {backend}: {len(mine)} entries, "
                     f"{_bytes(sum(e.bytes for e in mine))}")
    return lines


def cache_command(action: str, max_bytes: int | None = None) -> int:
    """`cache info`, `cache clear` or `cache prune`: print what was found or removed."""
    if action == "info":
        print("\n".join(f"{k}: {v}" for k, v in _cache_rows()))
        return 0
    root = cache.cache_dir()
    print(f"directory: {root}")
    if not root.exists():
        print("removed: 0 entries (the directory does not exist)")
        return 0
    reason = cache.check_dir(root, create=False)
    if reason is not None:
        print(f"refused: {reason} (nothing removed)")
        return 1
    if action == "clear":
        removed = cache.clear(root)
    else:
        limit = config.cache_max_bytes if max_bytes is None else max_bytes
        print(f"limit: {_bytes(limit)}")
        removed = cache.prune(limit, root=root)
    print("\n".join(_removed(removed)))
    print(f"total: {_bytes(sum(e.bytes for e in cache.entries(root)))}")
    return 0


def _max_bytes(text: str) -> int:
    try:
        return Config.cache_max_bytes.parse(text, "--max-bytes")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def main(argv=None) -> int:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m verglas", description=__doc__.split(
        "\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("info", help="versions, CPU, threads, BLAS, cache and CUDA")
    cache_parser = commands.add_parser("cache", help="the on-disk cache")
    actions = cache_parser.add_subparsers(dest="action", required=True)
    actions.add_parser("info", help="directory, trust, entries per backend, size, limit")
    actions.add_parser("clear", help="remove every entry")
    prune = actions.add_parser("prune", help="evict least recently used entries down to the "
                               "limit")
    prune.add_argument("--max-bytes", type=_max_bytes, default=None,
                       help="the limit (bytes; K, M, G suffixes): else cache_max_bytes")
    args = parser.parse_args(argv)
    apply_config()
    if args.command == "info":
        return info()
    return cache_command(args.action, getattr(args, "max_bytes", None))


if __name__ == "__main__":
    sys.exit(main())
