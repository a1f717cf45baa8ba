"""verglas.config: every VERGLAS_* switch in one object, read from the environment, settable at
run time (taking effect at the next compile), with clear errors for values that make no sense."""

from pathlib import Path

import numpy as np
import pytest

import verglas as vg
from verglas.config import Config
from verglas.rewrite.trace import Tracer

VARIABLES = {"cache_dir": "VERGLAS_CACHE_DIR", "cache_max_bytes": "VERGLAS_CACHE_MAX_BYTES",
             "threads": "VERGLAS_THREADS", "compile_processes": "VERGLAS_COMPILE_PROCESSES",
             "workspace": "VERGLAS_WORKSPACE", "vector_width": "VERGLAS_VECTOR_WIDTH",
             "numpy_blas": "VERGLAS_NUMPY_BLAS", "trace_rewrites": "VERGLAS_TRACE_REWRITES",
             "strict_rewrites": "VERGLAS_STRICT_REWRITES", "log": "VERGLAS_LOG"}


@pytest.fixture
def config(tmp_path):
    """verglas.config with a cache directory of the test's own; every switch set in the test
    goes back to the environment afterwards."""
    vg.config.cache_dir = tmp_path
    yield vg.config
    for name in Config.switches():
        delattr(vg.config, name)


def _program(c: float):
    """A program with temporaries (a workspace, unless switched off); `c` makes it a graph
    of its own."""
    x = vg.tensor("x", (None, 3), "float64")
    w = vg.tensor("w", (3, 3), "float64")
    return [x, w], vg.exp(vg.tanh(x @ w) @ w).sum(axis=1) * c


def test_the_switches_and_their_variables():
    assert {n: getattr(Config, n).variable for n in Config.switches()} == VARIABLES
    assert "workspace=" in repr(vg.config)


def test_environment_variables_are_read(monkeypatch, tmp_path):
    c = Config()
    for name, variable in VARIABLES.items():
        monkeypatch.delenv(variable, raising=False)
    assert (c.cache_dir, c.threads, c.workspace, c.vector_width, c.numpy_blas,
            c.trace_rewrites, c.strict_rewrites) == (
        Path.home() / ".cache" / "verglas", True, True, None, True, False, False)
    for variable, text in (("VERGLAS_CACHE_DIR", str(tmp_path)), ("VERGLAS_THREADS", "0"),
                           ("VERGLAS_WORKSPACE", "off"), ("VERGLAS_VECTOR_WIDTH", "256"),
                           ("VERGLAS_NUMPY_BLAS", "false"),
                           ("VERGLAS_TRACE_REWRITES", "profile"),
                           ("VERGLAS_STRICT_REWRITES", "yes")):
        monkeypatch.setenv(variable, text)
    assert (c.cache_dir, c.threads, c.workspace, c.vector_width, c.numpy_blas,
            c.trace_rewrites, c.strict_rewrites) == (
        tmp_path, False, False, 256, False, "profile", True)
    monkeypatch.setenv("VERGLAS_VECTOR_WIDTH", "auto")
    assert c.vector_width is None
    c.workspace = True  # a value set wins over the environment, until deleted
    assert c.workspace is True
    del c.workspace
    assert c.workspace is False


def test_invalid_values_are_clear_errors(monkeypatch):
    c = Config()
    for variable, text in (("VERGLAS_WORKSPACE", "maybe"), ("VERGLAS_VECTOR_WIDTH", "300"),
                           ("VERGLAS_VECTOR_WIDTH", "wide"), ("VERGLAS_TRACE_REWRITES", "2")):
        monkeypatch.setenv(variable, text)
        name = next(n for n, v in VARIABLES.items() if v == variable)
        with pytest.raises(ValueError, match=f"{variable}='{text}'"):
            getattr(c, name)
        monkeypatch.delenv(variable)
    for name, value in (("threads", "sometimes"), ("vector_width", 100), ("cache_dir", ""),
                        ("numpy_blas", 2), ("trace_rewrites", "loud")):
        with pytest.raises(ValueError, match=f"verglas.config.{name} must be"):
            setattr(c, name, value)
    with pytest.raises(AttributeError, match="no switch 'workspaces'"):
        c.workspaces = False


def test_an_invalid_variable_fails_the_compile_naming_it(config, monkeypatch):
    monkeypatch.setenv("VERGLAS_WORKSPACE", "maybe")
    with pytest.raises(ValueError, match="VERGLAS_WORKSPACE='maybe'"):
        vg.compile(*_program(2.0))


def test_setting_a_switch_changes_the_next_compile(config):
    with_ws = vg.compile(*_program(3.0))
    assert with_ws._runner.workspace
    config.workspace = False
    without = vg.compile(*_program(3.0))  # the same graph: another entry, another program
    assert not without._runner.workspace and "ws_take" not in without._runner.text
    assert "def program(in0, in1):" in without._runner.text
    assert "def program(in0, in1, ws, ob0):" in with_ws._runner.text  # (ob0: output blocks)
    assert with_ws._runner.workspace  # a Function compiled before keeps its code
    # the switch is part of the stored program's key: neither entry is the other's
    entries = [p.parent.name for p in (config.cache_dir / "cpu").rglob("program.py")]
    assert sum("-nows" in e for e in entries) == 1 and len(entries) == 2
    g = np.random.default_rng(0)
    xv, wv = g.normal(size=(5, 3)), g.normal(size=(3, 3))
    np.testing.assert_allclose(without(xv, wv), with_ws(xv, wv), rtol=1e-14)


def test_an_environment_variable_set_at_run_time_changes_the_next_compile(config, monkeypatch):
    monkeypatch.setenv("VERGLAS_WORKSPACE", "0")
    assert not vg.compile(*_program(4.0))._runner.workspace
    monkeypatch.setenv("VERGLAS_WORKSPACE", "1")
    assert vg.compile(*_program(4.0))._runner.workspace


def test_the_cache_directory_is_read_at_each_compile(config, tmp_path_factory):
    other = tmp_path_factory.mktemp("other-cache")
    vg.compile(*_program(5.0))
    config.cache_dir = other
    vg.compile(*_program(5.0))
    assert list((other / "cpu").rglob("function.pkl"))


def test_rewrite_switches(config):
    config.trace_rewrites, config.strict_rewrites = "profile", True
    tracer = Tracer.from_options()
    assert tracer.profile is not None and tracer.strict
    config.trace_rewrites, config.strict_rewrites = True, False
    tracer = Tracer.from_options()
    assert tracer.echo and not tracer.strict
    assert not Tracer.from_options(trace=False).echo  # an explicit option wins
