"""The on-disk cache users can trust: refused directories are never read, entries are checked
by digest before they are unpickled, the directory stays under its size limit (least recently
used entries go first), and processes compiling one program at once all get it right."""

import multiprocessing
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

import verglas as vg
from verglas import cache
from verglas.config import Config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# -- poison: a pickle whose unpickling records that it happened -------------------------------
POISONED: list[str] = []


def _poisoned(where: str) -> None:
    POISONED.append(where)


class _Poison:
    def __init__(self, where: str):
        self.where = where

    def __reduce__(self):
        return _poisoned, (self.where,)


@pytest.fixture
def fresh(tmp_path):
    """verglas.config pointing at a cache directory of the test's own (switches restored)."""
    vg.config.cache_dir = tmp_path / "cache"
    POISONED.clear()
    yield tmp_path / "cache"
    for name in Config.switches():
        delattr(vg.config, name)


def _program(c: float = 2.0):
    x = vg.tensor("x", shape=(None,), dtype="float64")
    return [x], [vg.exp(x) * c + 1.0, vg.sum(x * x)]


def _check(f, c: float = 2.0) -> None:
    xv = np.linspace(-1.0, 1.0, 7)
    a, b = f(xv)
    np.testing.assert_allclose(a, np.exp(xv) * c + 1.0, rtol=1e-12)
    np.testing.assert_allclose(b, (xv * xv).sum(), rtol=1e-12)


def _tree(root) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


@pytest.fixture(scope="module")
def layout(tmp_path_factory):
    """A cache directory holding the entries of `_program(3.0)`, compiled once."""
    root = tmp_path_factory.mktemp("layout") / "cache"
    vg.config.cache_dir = root
    try:
        _check(vg.compile(*_program(3.0)), 3.0)
    finally:
        del vg.config.cache_dir
    return root


def test_a_cold_compile_schedules_its_program_once(fresh, monkeypatch):
    """The first compile of a program rewrites and schedules it once: the Function took the
    Program the compile had just made (it lowered the graph a second time, ~0.1 s of a large
    gradient's cold compile)."""
    import verglas.function as function

    calls = []
    lower = function.schedule.lower
    monkeypatch.setattr(function.schedule, "lower",
                        lambda *a, **k: calls.append(1) or lower(*a, **k))
    f = vg.compile(*_program(5.0))
    _check(f, 5.0)
    assert f.program is not None and len(calls) == 1


# -- trust ---------------------------------------------------------------------------------------
def test_a_new_directory_is_created_private(fresh):
    root = fresh / "deeper" / "still"
    vg.config.cache_dir = root
    assert cache.usable() == root and (root.stat().st_mode & 0o777) == 0o700
    os.chmod(root, 0o755)  # (readable by others is fine: only writers are a threat)
    assert cache.check_dir(root) is None


def _poison(src, dst) -> None:
    """A copy of cache directory `src` whose every pickle (numba's index included) would run
    `_poisoned` when loaded; the digests are right, so only the trust check stands between."""
    shutil.copytree(src, dst)
    # (but the record of a program's callees, whose absence leaves numba's index unread)
    for path in [p for p in dst.rglob("*.pkl") if p.name != "callees.pkl"]:
        cache.store_pickle(path, _Poison("pickle"))
    import pickle

    for path in dst.rglob("*.nbi"):
        path.write_bytes(pickle.dumps(_Poison("numba")))


@pytest.mark.parametrize("how", ["world-writable", "someone else's"])
def test_a_refused_directory_is_never_read(fresh, layout, monkeypatch, how):
    _poison(layout, fresh)
    if how == "world-writable":
        os.chmod(fresh, 0o777)
        reason = r"writable by group and others \(mode 0777\)"
    else:
        monkeypatch.setattr(cache, "_uid", lambda: os.getuid() + 1)
        reason = "owned by uid"
    before = _tree(fresh)
    with pytest.warns(cache.CacheWarning, match=reason):
        f = vg.compile(*_program(3.0))
    _check(f, 3.0)
    assert POISONED == [] and f.cache_key is None
    assert _tree(fresh) == before  # nothing written either
    # the same directory trusted: the poison was live (so the check above could fail)
    os.chmod(fresh, 0o700)
    monkeypatch.undo()
    vg.config.cache_dir = fresh
    for name in [n for n in sys.modules if n.startswith("verglas_program_")]:
        del sys.modules[name]  # (else the program loaded for `layout` is reused, from there)
    _check(vg.compile(*_program(3.0)), 3.0)
    assert {"pickle", "numba"} <= set(POISONED)


# -- digests -------------------------------------------------------------------------------------
def test_a_damaged_file_reads_as_absent_and_is_removed(tmp_path):
    path = tmp_path / "e" / "x.pkl"
    cache.store_pickle(path, {"a": np.arange(3)})
    assert cache.load_pickle(path)["a"].tolist() == [0, 1, 2]
    data = path.read_bytes()
    for damaged in (data[:-1] + bytes([data[-1] ^ 1]), data[: len(data) // 2], data[:20],
                    data.split(b"\n", 1)[1]):  # flipped, truncated, header only, no header
        path.write_bytes(damaged)
        value, why = cache.read_pickle(path)
        assert value is None and "digest mismatch" in why and not path.exists()
    assert cache.read_pickle(path) == (None, "no entry")


def test_stored_bytecode_is_checked_by_digest(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("VALUE = 1\n")
    namespace: dict = {}
    exec(cache.code_of(path), namespace)
    stored = tmp_path / "m.code"
    data = stored.read_bytes()
    stored.write_bytes(data[:-3])  # truncated marshalled code: compiled again, stored again
    exec(cache.code_of(path), namespace)
    assert namespace["VALUE"] == 1 and stored.read_bytes() == data


_SCRIPT = """
import numpy as np, verglas as vg
x = vg.tensor("x", shape=(None,), dtype="float64")
f = vg.compile([x], [vg.exp(x) * 2.0 + 1.0, vg.sum(x * x)])
xv = np.linspace(-1.0, 1.0, 7)
a, b = f(xv)
assert np.allclose(a, np.exp(xv) * 2.0 + 1.0, rtol=1e-12) and np.isclose(b, (xv * xv).sum())
print("ok")
"""


def _run(root, log: str = "info") -> str:
    env = dict(os.environ, VERGLAS_CACHE_DIR=str(root), VERGLAS_LOG=log)
    out = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, text=True,
                         capture_output=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]
    return out.stderr


def _flip(path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))


def _truncate(path, keep: int | None = None) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2 if keep is None else keep])


def test_damaged_and_truncated_entries_end_in_a_correct_result(tmp_path):
    root = tmp_path / "cache"
    assert "cache miss (no entry: a new program)" in _run(root)
    one = lambda pattern: next(root.rglob(pattern))  # noqa: E731
    # every kind of stored file damaged at once: ours and numba's (which carry no digest)
    _truncate(one("inputs.pkl"))
    _flip(one("function.pkl"))
    _truncate(one("runner.pkl"), 10)
    _flip(one("globals.pkl"))
    _truncate(one("program.code"))
    _flip(one("fastcall-*.code"))
    for path in root.rglob("*.nb[ic]"):
        _truncate(path, 100)
    log = _run(root)
    assert "cache miss (corrupt entry (digest mismatch in inputs.pkl: removed))" in log
    assert "numba's cache" in log and "could not be read" in log
    for path in [*root.rglob("*.pkl"), *root.rglob("*.code")]:  # each written again
        assert cache.read_verified(path)[0] is not None, path
    # a truncated generated module (its digest is in runner.pkl) is generated again
    _truncate(one("program.py"))
    _run(root)
    assert "cache hit" in _run(root)


def test_cuda_kernels_ptx_is_checked_and_refused_like_the_rest(fresh, monkeypatch):
    from types import SimpleNamespace

    from verglas.cuda_backend import cache as ptx_cache

    compiled = []
    monkeypatch.setattr(ptx_cache, "compile_spec", lambda spec, cc: compiled.append(spec) or
                        f"// {spec.fingerprint}\n.visible .entry k_{spec.fingerprint}(\n")
    spec = SimpleNamespace(fingerprint="abc")
    assert ptx_cache.entry_name(ptx_cache.compile_ptx(spec, (9, 0))) == "k_abc"
    assert ptx_cache.compile_ptx(spec, (9, 0)) and len(compiled) == 1  # stored, then loaded
    path = ptx_cache.ptx_path(spec, (9, 0))
    _truncate(path)
    assert ptx_cache.entry_name(ptx_cache.compile_ptx(spec, (9, 0))) == "k_abc"
    assert len(compiled) == 2 and cache.read_verified(path)[0] is not None  # written again
    os.chmod(fresh, 0o770)
    with pytest.warns(cache.CacheWarning, match="writable by group"):
        assert ptx_cache.compile_ptx(spec, (9, 0))
    assert len(compiled) == 3  # neither loaded nor stored


# -- size ------------------------------------------------------------------------------------------
def _entries(root, sizes: dict, ago: float = 1000.0, backend: str = "cpu") -> None:
    """Entries named by `sizes` (name -> bytes), last used `ago` seconds ago and after, in
    that order."""
    now = time.time()
    for k, (name, size) in enumerate(sizes.items()):
        directory = root / backend / name
        directory.mkdir(parents=True)
        (directory / "data").write_bytes(b"x" * size)
        os.utime(directory, (now - ago + k, now - ago + k))


def test_prune_evicts_least_recently_used_entries(fresh):
    _entries(fresh, {"a": 1000, "b": 1000, "c": 1000, "d": 1000})
    cache.store_pickle(fresh / "cpu" / "a" / "x.pkl", 1)  # (+ a few bytes)
    os.utime(fresh / "cpu" / "a", (time.time() - 2000,) * 2)
    assert cache.load_pickle(fresh / "cpu" / "a" / "x.pkl") == 1  # a hit: "a" used last now
    removed = cache.prune(2500)
    assert sorted(e.path.name for e in removed) == ["b", "c"]
    assert sorted(p.name for p in (fresh / "cpu").iterdir()) == ["a", "d"]
    assert sum(e.bytes for e in cache.entries()) <= 2500


def test_a_store_past_the_limit_prunes_without_walking_every_time(fresh, monkeypatch):
    vg.config.cache_max_bytes = 10_000
    _entries(fresh, {"old": 3000, "older": 3000}, ago=4000)
    walks = []
    entries = cache.entries
    monkeypatch.setattr(cache, "entries", lambda *a: walks.append(1) or entries(*a))
    _entries(fresh, {"new1": 1000}, ago=3000)
    cache.record("cpu", "new1")  # no running total yet: one walk finds 7000 bytes
    assert len(walks) == 1 and cache._read_usage(fresh) == 7000
    _entries(fresh, {"new2": 1000}, ago=2000)
    cache.record("cpu", "new2")  # 8000: under the limit, counted without a walk
    assert len(walks) == 1 and cache._read_usage(fresh) == 8000
    _entries(fresh, {"new3": 3000}, ago=1000)
    cache.record("cpu", "new3")  # 11000: a walk, down to 90% of the limit, least recent first
    assert sorted(p.name for p in (fresh / "cpu").iterdir()) == ["new1", "new2", "new3", "older"]
    assert cache._read_usage(fresh) == 8000 and len(walks) == 2


def test_compiling_past_the_limit_evicts_other_programs(fresh):
    vg.config.cache_max_bytes = 1
    first = vg.compile(*_program(4.0))
    second = vg.compile(*_program(5.0))
    names = [p.name for p in (fresh / "cpu").iterdir()]
    assert names and all(n.startswith(second.cache_key) for n in names)
    _check(first, 4.0)
    _check(second, 5.0)


def test_the_size_limit_switch(monkeypatch):
    c = Config()
    monkeypatch.delenv("VERGLAS_CACHE_MAX_BYTES", raising=False)
    assert c.cache_max_bytes == 2 << 30
    for text, value in (("1048576", 1 << 20), ("2G", 2 << 30), ("512 MiB", 512 << 20),
                        ("64k", 64 << 10)):
        monkeypatch.setenv("VERGLAS_CACHE_MAX_BYTES", text)
        assert c.cache_max_bytes == value
    for text in ("0", "-5", "lots", "2X"):
        monkeypatch.setenv("VERGLAS_CACHE_MAX_BYTES", text)
        with pytest.raises(ValueError, match=f"VERGLAS_CACHE_MAX_BYTES='{text}'"):
            c.cache_max_bytes


# -- processes racing ----------------------------------------------------------------------------
def _race(barrier, results) -> None:
    """One racing process: compile the program when every process is ready, check it."""
    try:
        inputs, outputs = _program(6.0)
        barrier.wait(timeout=240)
        f = vg.compile(inputs, outputs)
        _check(f, 6.0)
        results.put("ok")
    except BaseException as exc:  # noqa: BLE001 -- reported to the test
        results.put(f"{type(exc).__name__}: {exc}")


def test_processes_compiling_one_program_at_once(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("VERGLAS_CACHE_DIR", str(root))  # (the spawned processes inherit it)
    ctx = multiprocessing.get_context("spawn")
    n = 4
    barrier, results = ctx.Barrier(n), ctx.Queue()
    workers = [ctx.Process(target=_race, args=(barrier, results)) for _ in range(n)]
    for w in workers:
        w.start()
    try:
        outcomes = [results.get(timeout=400) for _ in range(n)]
    finally:
        for w in workers:
            w.join(timeout=60)
    assert outcomes == ["ok"] * n and [w.exitcode for w in workers] == [0] * n
    out = subprocess.run([sys.executable, "-c", _SCRIPT.replace("2.0", "6.0")], text=True,
                         env=dict(os.environ, VERGLAS_LOG="info"), capture_output=True,
                         timeout=300, cwd=ROOT)
    assert out.stdout.strip() == "ok" and "cache hit" in out.stderr, out.stderr[-3000:]
