"""Tables (plain and markdown) and the JSON record of a run: machine, versions, results."""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import shlex
import sys
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


def fmt_time(seconds: float | None) -> str:
    """Seconds with a readable unit: `12.3 ms`, `4.56 us`."""
    if seconds is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def fmt_ratio(num: float | None, den: float | None) -> str:
    """`num / den` as `0.52x`, or `-` when either is missing."""
    if num is None or den is None or den == 0:
        return "-"
    ratio = num / den
    return f"{ratio:.2f}x" if ratio >= 0.1 else f"{ratio:.2g}x"


def table(headers: list[str], rows: list[list[str]], markdown: bool = False) -> str:
    """A pipe table; aligned for the terminal, plain for markdown."""
    if markdown:
        lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
        return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])
    widths = [max(len(str(c)) for c in col) for col in zip(headers, *rows)]

    def line(cells):
        return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *map(line, rows)])


def _meminfo_bytes() -> int | None:
    """Total RAM in bytes."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo, else platform.processor()."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _gpu() -> dict | None:
    """Name and memory of the current CUDA device, when cupy sees one."""
    try:
        import cupy
        dev = cupy.cuda.Device()
        props = cupy.cuda.runtime.getDeviceProperties(dev.id)
        return {"name": props["name"].decode(), "memory_bytes": props["totalGlobalMem"],
                "cuda_runtime": cupy.cuda.runtime.runtimeGetVersion(),
                "cuda_driver": cupy.cuda.runtime.driverGetVersion(),
                "compute_capability": dev.compute_capability}
    except Exception:  # noqa: BLE001 -- no cupy, no driver, no device
        return None


def machine(device: str) -> dict:
    """The machine a run happened on."""
    info = {"cpu": _cpu_model(), "cores": os.cpu_count(), "ram_bytes": _meminfo_bytes(),
            "os": platform.platform(), "hostname": platform.node()}
    if device == "cuda":
        info["gpu"] = _gpu()
    return info


def versions() -> dict:
    """Installed versions of python and the libraries under test."""
    found = {"python": sys.version.split()[0]}
    for dist in ("numpy", "numba", "llvmlite", "numba-cuda", "pytensor", "jax", "jaxlib", "cupy",
                 "verglas"):
        try:
            found[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            found[dist] = None
    if found["cupy"] is None:
        for dist in ("cupy-cuda13x", "cupy-cuda12x", "cupy-cuda11x"):
            try:
                found["cupy"] = importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                pass
    return found


def header(device: str, argv: list[str] | None = None) -> dict:
    """What every record starts with: date, exact command line, machine, versions."""
    argv = sys.orig_argv[1:] if argv is None else argv
    return {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "command": " ".join(shlex.quote(a) for a in [Path(sys.executable).name, *argv]),
            "device": device, "machine": machine(device), "versions": versions(),
            "blas": blas()}


def blas() -> dict:
    """numpy's BLAS as it runs here (verglas calls it): library, kernel, threads, and the
    OPENBLAS_* variables that pick an older kernel when set."""
    import numpy as np  # noqa: F401  (loads the BLAS threadpoolctl inspects)

    found = {"env": {k: v for k, v in os.environ.items() if k.startswith("OPENBLAS_")}}
    try:
        import threadpoolctl
    except ImportError:
        return found
    for info in threadpoolctl.threadpool_info():
        if info.get("user_api") == "blas":
            found.update({k: info.get(k) for k in ("internal_api", "version", "architecture",
                                                    "num_threads")})
            break
    return found


def write(name: str, record: dict, markdown: str) -> tuple[Path, Path]:
    """Write `results/<name>-<date>.json` and `.md` (suffixed `-2`, `-3`... if taken)."""
    RESULTS.mkdir(exist_ok=True)
    stem = f"{name}-{datetime.date.today().isoformat()}"
    path, n = RESULTS / f"{stem}.json", 1
    while path.exists():
        n += 1
        path = RESULTS / f"{stem}-{n}.json"
    path.write_text(json.dumps(record, indent=1, default=str) + "\n")
    png = draw(json.loads(path.read_text()), path.with_suffix(".png"))
    if png is not None:  # (the JSON as it reads back: what `python -m benchmarks.plot` draws)
        markdown += f"\n\n![verglas against its peers]({png.name})"
        print(f"wrote {png}")
    md = path.with_suffix(".md")
    md.write_text(markdown + "\n")
    return path, md


def draw(record: dict, path: Path) -> Path | None:
    """The record's plot (benchmarks/plot.py), where matplotlib is installed."""
    try:
        from benchmarks import plot
        return plot.draw(record, path)
    except ImportError as exc:
        print(f"no plot of {path.stem}: {exc}", file=sys.stderr)
        return None


def write_table(name: str, record: dict, title: str, text: str, headers, rows) -> None:
    """Write `record` as `results/<name>-<date>`: its markdown is `title`, the preamble,
    `text` and the table; print the paths."""
    markdown = "\n\n".join([f"# {title}", describe(record), text,
                             table(headers, rows, markdown=True)])
    for path in write(name, record, markdown):
        print(f"wrote {path}")


def describe(record: dict) -> str:
    """A markdown preamble naming the machine, versions and command of a record."""
    m, v = record["machine"], record["versions"]
    ram = f"{m['ram_bytes'] / 2**30:.0f} GiB" if m.get("ram_bytes") else "?"
    lines = [f"- date: {record['date']}", f"- command: `{record['command']}`",
             f"- machine: {m['cpu']}, {m['cores']} cores, {ram} RAM; {m['os']}"]
    if m.get("gpu"):
        lines.append(f"- gpu: {m['gpu']['name']}")
    lines.append("- versions: " + ", ".join(f"{k} {val}" for k, val in v.items() if val))
    b = record.get("blas")
    if b and b.get("internal_api"):
        env = ", ".join(f"{k}={val}" for k, val in b["env"].items()) or "no OPENBLAS_* set"
        lines.append(f"- blas: {b['internal_api']} {b['version']}, kernel {b['architecture']}, "
                     f"{b['num_threads']} threads ({env})")
    return "\n".join(lines)
