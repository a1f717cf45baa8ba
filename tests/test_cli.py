"""`python -m verglas info` and `python -m verglas cache info|clear|prune`: plain `key: value`
lines, run as users run them (a new process)."""

import os
import re
import subprocess
import sys
import time

import pytest

import verglas as vg
from verglas.__main__ import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _cli(*args, cache_dir, **env) -> subprocess.CompletedProcess:
    env = dict(os.environ, VERGLAS_CACHE_DIR=str(cache_dir), **env)
    env.pop("VERGLAS_LOG", None)
    return subprocess.run([sys.executable, "-m", "verglas", *args], env=env, text=True,
                          capture_output=True, timeout=120, cwd=ROOT)


def _rows(text: str) -> dict:
    """{key: value} of `key: value` lines (a group's lines under `group.key`)."""
    rows, group = {}, ""
    for line in text.splitlines():
        match = re.fullmatch(r"( *)([^:]+):(?: (.*))?", line)
        assert match, f"not a key: value line: {line!r}"
        indent, key, value = match.groups()
        if not indent and value is None:
            group = key
            continue
        rows[f"{group}.{key}" if indent else key] = value
    return rows


def _entries(root) -> None:
    """Three entries: cpu/old (1000 bytes, least recently used), cpu/new (1000), cuda/ptx
    (500, used last)."""
    now = time.time()
    for k, (backend, name, size) in enumerate((("cpu", "old", 1000), ("cpu", "new", 1000),
                                               ("cuda", "ptx", 500))):
        directory = root / backend / name
        directory.mkdir(parents=True)
        (directory / "data").write_bytes(b"x" * size)
        os.utime(directory, (now - 100 + k, now - 100 + k))
    os.chmod(root, 0o700)


def test_info(tmp_path):
    start = time.perf_counter()
    out = _cli("info", cache_dir=tmp_path / "cache")
    assert out.returncode == 0, out.stderr
    rows = _rows(out.stdout)
    for key in ("versions.python", "versions.verglas", "versions.numpy", "versions.numba",
                "versions.llvmlite", "versions.numba-cuda", "versions.cupy", "cpu.model",
                "cpu.vector features", "cpu.vector width", "threads.tbb", "threads.omp",
                "threads.workqueue", "threads.verglas row loops", "blas.verglas matrix products",
                "cache.directory", "cache.trusted", "cache.total", "cache.limit", "cuda.driver"):
        assert rows.get(key), (key, out.stdout)
    import numba
    import numpy as np

    assert rows["versions.numpy"] == np.__version__ and rows["versions.numba"] == numba.__version__
    assert rows["cache.directory"] == str(tmp_path / "cache")
    assert re.fullmatch(r"(128|256|512) bits .*|LLVM's choice .*", rows["cpu.vector width"])
    assert "error" not in " ".join(rows)
    assert time.perf_counter() - start < 60  # (no GPU here: the CUDA probe must not linger)


def test_cache_info_prune_and_clear(tmp_path):
    root = tmp_path / "cache"
    _entries(root)
    out = _cli("cache", "info", cache_dir=root, VERGLAS_CACHE_MAX_BYTES="1M")
    assert out.returncode == 0, out.stderr
    assert _rows(out.stdout) == {
        "directory": str(root), "trusted": "yes", "entries": "3",
        "entries cpu": "2, 2000 bytes (2.0 KiB)", "entries cuda": "1, 500 bytes",
        "total": "2500 bytes (2.4 KiB)", "limit": "1048576 bytes (1.0 MiB) (cache_max_bytes)"}
    out = _cli("cache", "prune", "--max-bytes", "1600", cache_dir=root)
    assert out.returncode == 0, out.stderr
    rows = _rows(out.stdout)
    assert rows["removed"] == "1 entries, 1000 bytes" and rows["total"] == "1500 bytes (1.5 KiB)"
    assert sorted(p.name for p in root.glob("*/*")) == ["new", "ptx"]
    out = _cli("cache", "clear", cache_dir=root)
    assert out.returncode == 0, out.stderr
    rows = _rows(out.stdout)
    assert rows["removed"] == "2 entries, 1500 bytes (1.5 KiB)"
    assert rows["removed cpu"] == "1 entries, 1000 bytes" and rows["total"] == "0 bytes"
    assert list(root.glob("*/*")) == []


@pytest.fixture
def cache_dir(tmp_path):
    vg.config.cache_dir = tmp_path / "cache"
    yield tmp_path / "cache"
    del vg.config.cache_dir


def test_a_refused_directory_is_reported_and_left_alone(cache_dir, capsys):
    _entries(cache_dir)
    os.chmod(cache_dir, 0o777)
    assert main(["cache", "info"]) == 0
    rows = _rows(capsys.readouterr().out)
    assert rows["trusted"] == "no: it is writable by group and others (mode 0777)"
    assert main(["cache", "clear"]) == 1
    assert "refused: it is writable" in capsys.readouterr().out
    assert len(list(cache_dir.glob("*/*"))) == 3


def test_prune_uses_the_configured_limit_and_checks_its_option(cache_dir, capsys):
    _entries(cache_dir)
    vg.config.cache_max_bytes = 2000
    assert main(["cache", "prune"]) == 0
    assert _rows(capsys.readouterr().out)["removed"] == "1 entries, 1000 bytes"
    with pytest.raises(SystemExit) as exc:
        main(["cache", "prune", "--max-bytes", "lots"])
    assert exc.value.code == 2 and "--max-bytes must be a positive number of bytes" in \
        capsys.readouterr().err
    del vg.config.cache_max_bytes


class _FakeLibcuda:
    """The driver calls `info` makes, answering as one H100 on a CUDA 12.8 driver."""

    def cuInit(self, flags):
        return 0

    def cuDriverGetVersion(self, version):
        version._obj.value = 12080
        return 0

    def cuDeviceGetCount(self, count):
        count._obj.value = 1
        return 0

    def cuDeviceGet(self, device, k):
        device._obj.value = k
        return 0

    def cuDeviceGetName(self, name, size, device):
        name.value = b"NVIDIA H100 80GB HBM3"
        return 0

    def cuDeviceGetAttribute(self, value, attribute, device):
        value._obj.value = {75: 9, 76: 0}[attribute]
        return 0

    def cuDeviceTotalMem_v2(self, memory, device):
        memory._obj.value = 80 << 30
        return 0


def test_info_reads_the_cuda_driver(monkeypatch):
    import ctypes

    from verglas import __main__ as cli

    monkeypatch.setattr(ctypes, "CDLL", lambda name: _FakeLibcuda())
    rows = dict(cli._cuda())
    assert rows["driver"] == "CUDA 12.8" and rows["devices"] == 1
    assert rows["device 0"] == "NVIDIA H100 80GB HBM3 (sm_90, 80.0 GiB)"
    assert rows["runtime"]  # (cupy's, or why it cannot be imported)
