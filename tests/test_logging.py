"""The "verglas" logger: one INFO line per compile (its total and what the cache did, a miss
with its reason), one DEBUG line per stage, nothing when a Function is called; VERGLAS_LOG
prints them on stderr through one handler, and verglas never touches the root logger."""

import logging
import os
import subprocess
import sys

import numpy as np
import pytest

import verglas as vg
from verglas import cache, logger as logs
from verglas.config import Config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def fresh(tmp_path, monkeypatch, caplog):
    """A cache directory of the test's own, VERGLAS_LOG unset, the verglas logger captured at
    DEBUG; every switch and the logger's handlers restored afterwards."""
    monkeypatch.delenv("VERGLAS_LOG", raising=False)
    vg.config.cache_dir = tmp_path / "cache"
    caplog.set_level(logging.DEBUG, logger="verglas")
    yield tmp_path / "cache"
    for name in Config.switches():
        delattr(vg.config, name)
    monkeypatch.delenv("VERGLAS_LOG", raising=False)
    logs.apply_config()


def _program(c: float):
    x = vg.tensor("x", shape=(None, 3), dtype="float64")
    return [x], vg.tanh(x).sum(axis=1) * c


def _messages(caplog, level=logging.DEBUG) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "verglas" and r.levelno >= level]


def test_a_compile_reports_its_stages_and_the_cache_outcome(fresh, caplog):
    vg.compile(*_program(2.0))
    info = _messages(caplog, logging.INFO)
    assert len(info) == 1 and "compile(x) on cpu: compiled in" in info[0]
    assert info[0].endswith("cache miss (no entry: a new program)")
    stages = " ".join(_messages(caplog))
    for stage in ("freeze+fingerprint", "cache lookup", "rewrite", "schedule", "store graph",
                  "backend codegen+compile"):
        assert f"compile(x) on cpu: {stage} " in stages and " ms" in stages
    caplog.clear()
    f = vg.compile(*_program(2.0))
    assert _messages(caplog, logging.INFO)[0].endswith("cache hit")
    assert any(": backend load " in m for m in _messages(caplog))
    caplog.clear()
    for _ in range(3):  # calls log nothing (compile-time code only logs)
        f(np.ones((2, 3)))
        f([[1, 2, 3]])
    assert caplog.records == []


def test_a_miss_names_its_reason(fresh, caplog):
    function = vg.compile(*_program(3.0))
    key = function.cache_key
    entry = fresh / "cpu" / key
    # an entry of this program written by another verglas, numba or numpy: the key's last part
    other = entry.with_name(key[:cache.GRAPH_CHARS] + "0" * (len(key) - cache.GRAPH_CHARS))
    entry.rename(other)
    caplog.clear()
    vg.compile(*_program(3.0))
    (line,) = _messages(caplog, logging.INFO)
    assert "cache miss (no entry for these versions: this program's entry was written by " \
           f"{cache.versions()}, this is {cache.versions()})" in line
    data = (entry / "inputs.pkl").read_bytes()
    (entry / "inputs.pkl").write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    caplog.clear()
    vg.compile(*_program(3.0))
    (line,) = _messages(caplog, logging.INFO)
    assert line.endswith("cache miss (corrupt entry (digest mismatch in inputs.pkl: removed); "
                         "the optimized graph read)")
    assert cache.load_pickle(entry / "inputs.pkl") is not None  # written again


def test_the_logger_has_a_null_handler_and_the_root_logger_is_left_alone(fresh):
    root = list(logging.getLogger().handlers)
    vg.compile(*_program(2.5))
    handlers = logging.getLogger("verglas").handlers
    assert [type(h) for h in handlers] == [logging.NullHandler]
    assert logging.getLogger().handlers == root


def test_the_switch_attaches_one_stderr_handler(fresh, monkeypatch, capsys):
    root = list(logging.getLogger().handlers)
    monkeypatch.setenv("VERGLAS_LOG", "debug")
    vg.compile(*_program(4.0))
    vg.compile(*_program(4.0))
    verglas_logger = logging.getLogger("verglas")
    ours = [h for h in verglas_logger.handlers if type(h) is logging.StreamHandler]
    assert len(ours) == 1 and ours[0].level == logging.DEBUG
    err = capsys.readouterr().err
    assert "verglas DEBUG: compile(x) on cpu: rewrite" in err
    assert "verglas INFO: compile(x) on cpu: compiled in" in err and "cache hit" in err
    monkeypatch.setenv("VERGLAS_LOG", "warning")
    vg.compile(*_program(4.0))
    assert ours[0].level == logging.WARNING and "verglas INFO" not in capsys.readouterr().err
    monkeypatch.delenv("VERGLAS_LOG")
    vg.compile(*_program(4.0))  # unset again: the handler goes, the level is given back
    assert [type(h) for h in verglas_logger.handlers] == [logging.NullHandler]
    assert verglas_logger.level == logging.NOTSET and logging.getLogger().handlers == root


def test_an_invalid_level_is_a_clear_error(fresh, monkeypatch):
    monkeypatch.setenv("VERGLAS_LOG", "loud")
    with pytest.raises(ValueError, match="VERGLAS_LOG='loud' must be one of debug, info"):
        vg.compile(*_program(5.0))
    with pytest.raises(ValueError, match="verglas.config.log must be one of"):
        vg.config.log = "verbose"


_SCRIPT = """
import numpy as np, verglas as vg
x = vg.tensor("x", shape=(None, 3), dtype="float64")
f = vg.compile([x], vg.tanh(x).sum(axis=1) * 6.0)
assert np.allclose(f(np.ones((2, 3))), np.tanh(1.0) * 18.0)
print("ok")
"""


def test_a_fresh_directory_misses_then_a_fresh_process_hits(tmp_path):
    env = dict(os.environ, VERGLAS_CACHE_DIR=str(tmp_path / "cache"), VERGLAS_LOG="info")
    logs_seen = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, text=True,
                             capture_output=True, timeout=300, cwd=ROOT)
        assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]
        logs_seen.append([line for line in out.stderr.splitlines()
                          if line.startswith("verglas INFO: compile(x) on cpu")])
    (first,), (second,) = logs_seen
    assert first.endswith("cache miss (no entry: a new program)")
    assert second.endswith("cache hit")
