"""A forked second process that compiles while this one does: numba (and numba-cuda) compile
one function at a time, on one core.

Work items are sent as (index, payload); the helper runs `work(payload)` on each in the order
sent, and this process compiles the items it needs and the helper has not started (`take`).
Who compiles an item is decided once, under one lock, in a byte per item the two processes
share. The helper stores what it compiles where this process finds it (numba's cache, the
PTX cache) and reports each item; `wait` reads the reports until the items asked for are done,
the helper is gone, or WAIT_SECONDS pass (then it is killed). The helper never returns into
the caller's code: it leaves with os._exit at the end of input.

Linux only (fork), with two CPUs or more, `config.compile_processes` on (`available`).
"""

from __future__ import annotations

import contextlib
import mmap
import multiprocessing
import os
import pickle
import select
import signal
import struct
import sys
import time
import warnings

from verglas.config import config
from verglas.logger import logger

__all__ = ["CompileHelper", "available"]

# the longest wait for an item the helper has started (this process takes those it has
# not), after which the helper is killed and its items are compiled here
WAIT_SECONDS = 120.0
MAX_ITEMS = 4096  # items one helper may be sent
FREE, HELPER, HERE = 0, 1, 2  # who compiles an item: its byte in the shared claims
_REPORT = struct.Struct("<ib")  # (item, compiled: 1 or 0)


def available() -> bool:
    """A helper can be forked here and has a CPU of its own to run on."""
    if not config.compile_processes or not hasattr(os, "fork") or sys.platform != "linux":
        return False
    try:
        return len(os.sched_getaffinity(0)) >= 2
    except OSError:
        return False


class CompileHelper:
    """One helper process, forked at the first `send`; `work(payload)` runs in it."""

    def __init__(self, work):
        self.work = work
        self.child = None  # (pid, write fd, read fd) once forked
        self.closed = False  # the helper is gone (exited, failed or killed), or never came
        self.claims = None  # (shared bytes, lock), or None: then the helper takes every item
        self.reports: dict[int, bool] = {}  # item -> the helper compiled it
        self._buffer = b""  # a report read in part

    def send(self, k: int, payload) -> bool:
        """Hand item k to the helper; False when it cannot take it (compile it here)."""
        if self.closed or k >= MAX_ITEMS:
            return False
        try:
            message = pickle.dumps((k, payload))
        except Exception:
            return False
        if len(message) + 4 > select.PIPE_BUF:  # (written whole or not at all)
            return False
        if self.child is None and not self._fork():
            return False
        try:
            os.write(self.child[1], struct.pack("<I", len(message)) + message)
        except OSError:  # (the pipe is full, or the helper is gone)
            return False
        return True

    def take(self, k: int) -> bool:
        """Claim item k for this process: True unless the helper has started it."""
        return not self.closed and self.child is not None and _claim(self.claims, k, HERE)

    def wait(self, items) -> None:
        """Read the helper's reports until every item of `items` that this process did not
        take is reported, or the helper is gone."""
        wanted = {k for k in items if self.claims is None or self.claims[0][k] != HERE}
        deadline = time.monotonic() + WAIT_SECONDS
        while not self.closed and not wanted <= self.reports.keys():
            left = deadline - time.monotonic()
            if left <= 0 or not self._read(left):
                if not self.closed:
                    logger.warning("compile helper: no report for %.0f s; compiling its "
                                   "items here", WAIT_SECONDS)
                    self.close()
                break

    def reported(self, k: int) -> bool:
        """Whether item k is reported done (or the helper is gone), reading what has come."""
        if self.closed or k in self.reports:
            return True
        self._read(0.0)
        return self.closed or k in self.reports

    def _read(self, timeout: float) -> bool:
        """Read the reports that come within `timeout` seconds; False when none came."""
        if not select.select([self.child[2]], [], [], timeout)[0]:
            return False
        data = os.read(self.child[2], 4096)
        if not data:  # (it exited)
            self.close()
            return True
        self._buffer += data
        while len(self._buffer) >= _REPORT.size:
            k, ok = _REPORT.unpack_from(self._buffer)
            self._buffer = self._buffer[_REPORT.size:]
            self.reports[k] = bool(ok)
        return True

    def close(self) -> None:
        """End the helper (killed: what it has not stored is compiled here when needed)."""
        if self.closed:
            return
        self.closed = True
        if self.child is None:
            return
        pid, to_child, from_child = self.child
        os.close(to_child)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        os.close(from_child)

    def _fork(self) -> bool:
        try:
            self.claims = (mmap.mmap(-1, MAX_ITEMS), multiprocessing.Lock())
        except OSError:  # (no shared semaphores here: the helper takes every item it gets)
            self.claims = None
        from_parent, to_child = os.pipe()  # (read end, write end)
        from_child, to_parent = os.pipe()
        try:
            with warnings.catch_warnings():
                # Python 3.12+ warns of fork in a threaded process, and JAX's fork hook that
                # JAX may deadlock in the child: the helper runs the compiler alone
                warnings.simplefilter("ignore", DeprecationWarning)
                warnings.filterwarnings("ignore", r"os\.fork\(\) was called", RuntimeWarning)
                pid = os.fork()
        except OSError:
            for fd in (to_child, from_parent, from_child, to_parent):
                os.close(fd)
            self.closed = True
            return False
        if pid == 0:
            os.close(to_child)
            os.close(from_child)
            _serve(from_parent, to_parent, self.work, self.claims)
        os.close(from_parent)
        os.close(to_parent)
        os.set_blocking(to_child, False)
        self.child = (pid, to_child, from_child)
        return True


def _claim(claims, k: int, who: int) -> bool:
    """Take item k for `who` unless the other process has (without shared claims, the helper
    takes every item and this process none)."""
    if claims is None:
        return who == HELPER
    shared, lock = claims
    with lock:
        if shared[k] != FREE:
            return False
        shared[k] = who
    return True


def _serve(read_fd: int, write_fd: int, work, claims) -> None:
    """The helper's loop: run `work` on each item it is sent and this process has not taken,
    report it, and leave at the end of input, never returning into the caller's code."""
    status = 0
    try:
        while True:
            head = _read_exactly(read_fd, 4)
            if head is None:
                break
            k, payload = pickle.loads(_read_exactly(read_fd, struct.unpack("<I", head)[0]))
            if not _claim(claims, k, HELPER):
                continue
            try:
                work(payload)
                ok = 1
            except BaseException:
                ok = 0
            os.write(write_fd, _REPORT.pack(k, ok))
    except BaseException:
        status = 1
    finally:
        os._exit(status)


def _read_exactly(fd: int, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = os.read(fd, n - len(data))
        if not chunk:
            return None
        data += chunk
    return data
