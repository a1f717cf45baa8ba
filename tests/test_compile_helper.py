"""verglas.compile_helper: a forked process runs the work items this one does not take, each
item by exactly one of them; a helper that dies or never reports leaves its items here."""

import os

import pytest

from verglas import compile_helper
from verglas.compile_helper import CompileHelper

pytestmark = pytest.mark.skipif(not compile_helper.available(),
                                reason="needs fork and two CPUs")


def _writer(directory):
    """Work that leaves a trace: a file per item, named by the process that ran it."""
    def work(payload):
        (directory / f"{payload}.{os.getpid()}").write_text(str(payload))
    return work


def test_each_item_runs_once_in_one_process_or_the_other(tmp_path):
    helper = CompileHelper(_writer(tmp_path))
    try:
        for k in range(40):
            assert helper.send(k, k)
        here = [k for k in reversed(range(40)) if helper.take(k)]
        for k in here:
            _writer(tmp_path)(k)
        helper.wait(range(40))
    finally:
        helper.close()
    done = {}
    for path in tmp_path.iterdir():
        item, pid = map(int, path.name.split("."))
        assert item not in done, f"item {item} ran twice"
        done[item] = pid
    assert sorted(done) == list(range(40))
    assert {k for k, pid in done.items() if pid == os.getpid()} == set(here)
    assert all(helper.reports[k] for k, pid in done.items() if pid != os.getpid())


def test_a_helper_that_dies_leaves_its_items_unreported(tmp_path, monkeypatch):
    monkeypatch.setattr(compile_helper, "_serve", lambda *args: os._exit(3))
    helper = CompileHelper(_writer(tmp_path))
    try:
        assert helper.send(0, 0)
        monkeypatch.setattr(compile_helper, "_claim", lambda claims, k, who: False)
        assert not helper.take(0)
        helper.wait([0])  # (returns: the helper is gone)
    finally:
        helper.close()
    assert helper.closed and helper.reports == {}


def test_a_silent_helper_is_killed_after_the_time_limit(tmp_path, monkeypatch):
    import time

    monkeypatch.setattr(compile_helper, "WAIT_SECONDS", 0.5)
    monkeypatch.setattr(compile_helper, "_serve", lambda *args: time.sleep(60))
    helper = CompileHelper(_writer(tmp_path))
    assert helper.send(0, 0)
    monkeypatch.setattr(compile_helper, "_claim", lambda claims, k, who: False)
    started = time.monotonic()
    helper.wait([0])
    assert helper.closed and time.monotonic() - started < 10
    pid = helper.child[0]
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # (reaped)


def test_the_switch_turns_helpers_off(monkeypatch):
    monkeypatch.setattr(compile_helper.config, "compile_processes", False)
    assert not compile_helper.available()
