"""The CUDA runtime's launch path without a GPU: graph replay against a fake cupy (the order of
stream waits and error reads, one replay at a time), and what a driver too old for the PTX
is told."""

import sys
import threading
import time
import types

import numpy as np
import pytest

from verglas.cuda_backend import runtime


class _Log(list):
    def add(self, event):
        self.append(event)


class _Stream:
    def __init__(self, name, log):
        self.name, self.log = name, log

    def record(self):
        self.log.add(f"{self.name}.record")
        return f"event of {self.name}"

    def wait_event(self, event):
        self.log.add(f"{self.name}.wait({event})")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _Graph:
    def __init__(self, log):
        self.log, self.busy, self.overlaps = log, False, 0

    def launch(self, stream):
        if self.busy:
            self.overlaps += 1
        self.busy = True
        time.sleep(0.002)  # a replay takes a while; another caller must not interleave
        self.log.add("launch")
        self.busy = False


class _Launcher:
    def __init__(self, log):
        self.log = log

    def check_errors(self, pending):
        self.log.add("check_errors")


def _captured_call(log, monkeypatch):
    caller = _Stream("caller", log)
    fake = types.SimpleNamespace(
        cuda=types.SimpleNamespace(get_current_stream=lambda: caller),
        copyto=lambda dst, src: dst.__setitem__(Ellipsis, src))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    call = object.__new__(runtime.CapturedCall)
    call.launcher = _Launcher(log)
    call.stream = _Stream("graph", log)
    call.inputs = [np.zeros(3)]
    call.outputs = [np.ones(3)]
    call.graph = _Graph(log)
    call.pending = [("flag", IndexError, "message")]
    call._lock = threading.Lock()
    return call


def test_replay_reads_the_error_flags_after_the_callers_stream_waits(monkeypatch):
    log = _Log()
    call = _captured_call(log, monkeypatch)
    call.replay([np.arange(3.0)])
    wait = log.index("caller.wait(event of graph)")
    assert log.index("launch") < wait < log.index("check_errors"), log


def test_one_replay_at_a_time(monkeypatch):
    log = _Log()
    call = _captured_call(log, monkeypatch)
    threads = [threading.Thread(target=call.replay, args=([np.full(3, k)],)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert call.graph.overlaps == 0 and log.count("launch") == 8


PTX_90 = ".version 9.0\n.target sm_90\n.address_size 64\n"


def test_a_driver_too_old_for_the_ptx_is_told_what_to_install():
    text = runtime.load_failure("k0_map", PTX_90, (12, 4), RuntimeError("CUDA_ERROR_INVALID_PTX"))
    assert "CUDA 12.4" in text and "PTX ISA 9.0" in text and "k0_map" in text
    assert "needs a CUDA 13.0 driver" in text and "verglas[cuda12]" in text
    assert runtime.ptx_needs(".version 8.8\n") == ((8, 8), (12, 9))
    newer = runtime.load_failure("k0_map", PTX_90, (13, 0), RuntimeError("other"))
    assert "needs a CUDA" not in newer  # a current driver: the error is something else


@pytest.mark.parametrize("version,needs", [((9, 0), (13, 0)), ((8, 0), (12, 0))])
def test_ptx_versions_map_to_driver_releases(version, needs):
    assert runtime.ptx_needs(f".version {version[0]}.{version[1]}\n") == (version, needs)


class _FakeCapture:
    def __init__(self, runner, inputs):
        self.nbytes = sum(a.nbytes for a in inputs)

    def replay(self, inputs):
        return ["replayed"]


class _EagerLauncher:
    def from_input(self, a):
        return a

    def begin_call(self):
        pass

    def take_pending(self):
        return []

    def check_errors(self, pending):
        pass


def _runner(monkeypatch, max_graphs, max_bytes):
    monkeypatch.setattr(runtime, "CapturedCall", _FakeCapture)
    r = object.__new__(runtime.CUDARunner)
    r.launcher, r.constants = _EagerLauncher(), ()
    r.fn = lambda L, *inputs: ("eager",)
    r.use_graphs, r.capture_error = True, None
    r._graphs, r._seen, r._graphs_lock = {}, {}, threading.Lock()
    r.MAX_GRAPHS, r.MAX_GRAPH_BYTES = max_graphs, max_bytes
    r._graph_bytes = 1 << 20
    r._ahead_started = True  # (no kernels to compile ahead)
    return r


def test_the_first_call_asks_the_launcher_to_compile_every_kernel_ahead(monkeypatch):
    """The first call hands every kernel of the program to the launcher's compile_ahead
    (a helper process compiles them while the call compiles what it launches); later calls
    do not."""
    r = _runner(monkeypatch, max_graphs=2, max_bytes=1 << 20)
    asked = []
    r._ahead_started = False
    r.generated = type("G", (), {"all_kernels": lambda self: iter(["k0", "k1"])})()
    r.launcher.compile_ahead = lambda specs: asked.append(list(specs))
    r([np.zeros(3)]), r([np.zeros(3)]), r([np.zeros(4)])
    assert asked == [["k0", "k1"]]


def test_graphs_are_kept_least_recently_used_first_within_a_count_and_bytes(monkeypatch):
    r = _runner(monkeypatch, max_graphs=2, max_bytes=1 << 20)
    a, b, c = np.zeros(10), np.zeros(20), np.zeros(30)
    assert r([a]) == ["eager"] and r([a]) == ["replayed"]  # a signature's second call captures
    r([b]), r([b]), r([a]), r([c]), r([c])  # c's capture evicts b, used less recently than a
    assert [k[0][0] for k in r._graphs] == [(10,), (30,)]
    big = _runner(monkeypatch, max_graphs=8, max_bytes=300)
    for x in (a, a, b, b):  # 80 + 160 bytes: both kept
        big([x])
    big([c]), big([c])  # + 240 bytes > 300: the oldest go, the newest stays
    assert [k[0][0] for k in big._graphs] == [(30,)]


def test_large_calls_run_eagerly_where_a_replay_would_copy_more_than_it_saves(monkeypatch):
    """A replay copies inputs in and outputs out: for ew_chain on 1e8 float32 that was 4x the
    kernel's own time on an H100. Past the byte budget a signature is never captured."""
    r = _runner(monkeypatch, max_graphs=8, max_bytes=1 << 30)
    small, large = np.zeros(1000), np.zeros(100_000)  # 8 KB, 800 KB (+ 8 bytes out)
    r._graph_bytes = 100_000
    assert [r([small])[0] for _ in range(3)] == ["eager", "replayed", "replayed"]
    assert [r([large])[0] for _ in range(3)] == ["eager", "eager", "eager"]
    assert [k[0][0] for k in r._graphs] == [(1000,)]


class _DeviceArray:
    """cupy.empty's result for `upload`: its shape, and what `set` copied into it."""

    def __init__(self, shape, dtype):
        self.shape, self.dtype, self.value = shape, np.dtype(dtype), None

    def set(self, host):
        assert host.shape == self.shape and host.flags.c_contiguous
        self.value = host.copy()


@pytest.mark.parametrize("value", [np.float64(-0.0), np.array(2.5), np.arange(6.0)[::-2],
                                   np.zeros((0, 3))])
def test_upload_keeps_the_shape_and_every_bit(value):
    """A 0-d host value stays 0-d on the device (np.ascontiguousarray made it (1,): shape
    mismatches on the first GPU run of 2026-11-27's code), strided ones arrive contiguous."""
    launcher = runtime.CupyLauncher.__new__(runtime.CupyLauncher)
    launcher.xp = types.SimpleNamespace(empty=_DeviceArray)
    out = launcher.upload(value)
    assert out.shape == np.shape(value) and out.dtype == np.asarray(value).dtype
    if np.size(value):
        np.testing.assert_array_equal(out.value, value)
        assert np.signbit(out.value).tolist() == np.signbit(value).tolist()
