"""A program's row functions and kernels compiled in a second process while the program
itself compiles: numba compiles one function at a time, on one core.

Typing the program needs no more of such a callee than its signature: it returns nothing and
calls none of the program's own functions (a leaf). Its machine code is needed only when the
JIT loads the program, which finds it by its symbol (callees.py). So while a stored program
types, lowers and optimizes here, a child process forked at its first leaf call compiles the
leaves, in the order the typing meets them, into numba's on-disk cache (a stored program's
functions are cached); before a module that calls them is handed to the JIT, `resolve` compiles
here the leaves the child has not started (the last first), waits for the others, loads them
from the cache and registers their symbols. A leaf the child failed to compile is compiled here.

On Linux (fork) with two CPUs or more, `config.compile_processes` on; elsewhere, and for
programs that are not stored, leaves compile where they are called, as before.
"""

from __future__ import annotations

import contextlib
import dis
import mmap
import multiprocessing
import os
import pickle
import select
import signal
import struct
import sys
import threading
import time
import warnings

from numba.core import codegen, types
from numba.core.caching import NullCache
from numba.core.registry import CPUDispatcher
from numba.core.typing import signature

from verglas.config import config
from verglas.logger import logger

__all__ = ["session", "defer", "deferred", "declared"]

# the longest wait for a leaf the child is compiling (the parent takes those it has not
# started), after which the child is killed and its leaves compiled here
WAIT_SECONDS = 120.0
MAX_ENTRIES = 4096  # leaves one compile may send aside
_ACK = struct.Struct("<ib")  # (entry index, compiled: 1 or 0)
FREE, CHILD, PARENT = 0, 1, 2  # who compiles an entry: its byte in the shared claims

_local = threading.local()


class _Session:
    """The leaves of one program compile: deferred, sent to the child, declared, resolved."""

    def __init__(self, module: str):
        self.module = module
        self.entries: list[tuple] = []  # (dispatcher, argtypes)
        self.index: dict[tuple, int] = {}  # (id(dispatcher), argtypes) -> entry index
        self.declared: dict[str, tuple] = {}  # symbol -> (entry index, register)
        self.acked: dict[int, bool] = {}  # entry index -> the child compiled it
        self.child = None  # (pid, write fd, read fd) once forked
        self.closed = False  # the child is gone (exited, failed or killed)
        self.claims = None  # (shared bytes, lock): who takes each entry, FREE until taken

    # -- the child ---------------------------------------------------------------------------
    def send(self, k: int) -> bool:
        """Hand entry k to the child (forked on the first); False when it cannot take it."""
        dispatcher, argtypes = self.entries[k]
        try:
            message = pickle.dumps((k, dispatcher.py_func.__name__, argtypes))
        except Exception:
            return False
        if len(message) + 4 > select.PIPE_BUF or self.closed or k >= MAX_ENTRIES:
            return False  # (written whole or not at all: a pipe's atomic size)
        if self.child is None and not self._fork():
            return False
        try:
            os.write(self.child[1], struct.pack("<I", len(message)) + message)
        except OSError:  # (full, or the child is gone)
            return False
        return True

    def _fork(self) -> bool:
        try:
            self.claims = (mmap.mmap(-1, MAX_ENTRIES), multiprocessing.Lock())
        except OSError:  # (no shared semaphores here: the child takes every entry)
            self.claims = None
        from_parent, to_child = os.pipe()  # (read end, write end)
        from_child, to_parent = os.pipe()
        try:
            with warnings.catch_warnings():
                # Python 3.12+ warns of fork in a threaded process, and JAX's fork hook that
                # JAX may deadlock in the child: the child runs numba's compiler alone
                warnings.simplefilter("ignore", DeprecationWarning)
                warnings.filterwarnings("ignore", r"os\.fork\(\) was called", RuntimeWarning)
                pid = os.fork()
        except OSError:
            for fd in (to_child, from_parent, from_child, to_parent):
                os.close(fd)
            self.closed = True
            return False
        if pid == 0:  # the child: compile what arrives, then leave without cleanup
            _local.session = None
            os.close(to_child)
            os.close(from_child)
            _serve(from_parent, to_parent, sys.modules[self.module].__dict__, self.claims)
        os.close(from_parent)
        os.close(to_parent)
        os.set_blocking(to_child, False)
        self.child = (pid, to_child, from_child)
        return True

    def _await(self, wanted: set[int]) -> None:
        """Read the child's reports until every entry of `wanted` is reported, the child is
        gone, or WAIT_SECONDS pass (then it is killed)."""
        deadline = time.monotonic() + WAIT_SECONDS
        buffer = b""
        while not self.closed and not wanted <= self.acked.keys():
            left = deadline - time.monotonic()
            ready = select.select([self.child[2]], [], [], max(left, 0))[0] if left > 0 else []
            if not ready:
                logger.warning("cpu backend: the compile process took over %.0f s; compiling "
                               "its functions here", WAIT_SECONDS)
                self.close(kill=True)
                break
            data = os.read(self.child[2], 4096)
            if not data:  # (exited)
                self.close()
                break
            buffer += data
            while len(buffer) >= _ACK.size:
                k, ok = _ACK.unpack_from(buffer)
                buffer = buffer[_ACK.size:]
                self.acked[k] = bool(ok)

    def close(self, kill: bool = False) -> None:
        if self.child is None or self.closed:
            self.closed = True
            return
        self.closed = True
        pid, to_child, from_child = self.child
        os.close(to_child)  # (end of input: the child exits)
        if kill:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        os.close(from_child)

    # -- the parent --------------------------------------------------------------------------
    def resolve(self, symbols) -> None:
        """Compile (from the cache, where the child stored them) and register the entries of
        `symbols`."""
        todo = [(name, *self.declared.pop(name)) for name in symbols if name in self.declared]
        if not todo:
            return
        if self.child is not None:
            for _, k, _ in reversed(todo):  # (the child works from the first)
                if not self.closed and _claim(self.claims, k, PARENT):
                    dispatcher, argtypes = self.entries[k]
                    dispatcher.compile(argtypes)
                    self.acked[k] = False
            self._await({k for _, k, _ in todo})
        for _, k, register in todo:
            dispatcher, argtypes = self.entries[k]
            dispatcher.compile(argtypes)  # (a cache load when the child compiled it)
            register(dispatcher, argtypes)


def _claim(claims, k: int, who: int) -> bool:
    """Take entry k for `who` unless the other process has; True when taken (always, for the
    child, without shared claims)."""
    if claims is None:
        return who == CHILD
    shared, lock = claims
    with lock:
        if shared[k] != FREE:
            return False
        shared[k] = who
    return True


def _serve(read_fd: int, write_fd: int, namespace: dict, claims) -> None:
    """The child's loop: compile each leaf it is sent and the parent has not taken (numba
    stores it in its cache), report it, and exit at the end of input."""
    status = 0
    try:
        while True:
            head = _read_exactly(read_fd, 4)
            if head is None:
                break
            k, name, argtypes = pickle.loads(_read_exactly(read_fd, struct.unpack("<I", head)[0]))
            if not _claim(claims, k, CHILD):
                continue
            try:
                namespace[name].compile(argtypes)
                ok = 1
            except BaseException:
                ok = 0
            os.write(write_fd, _ACK.pack(k, ok))
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


def _enabled() -> bool:
    if not config.compile_processes or not hasattr(os, "fork") or sys.platform != "linux":
        return False
    try:
        return len(os.sched_getaffinity(0)) >= 2
    except OSError:
        return False


@contextlib.contextmanager
def session(module: str):
    """Compile the leaves of the stored program module `module` aside while the body runs
    (the program's compile); nothing when not enabled."""
    if getattr(_local, "session", None) is not None or not _enabled():
        yield
        return
    current = _local.session = _Session(module)
    try:
        yield
        current.resolve(list(current.declared))  # (declared but never loaded: registered)
    finally:
        _local.session = None
        current.close(kill=True)


def defer(dispatcher, argtypes) -> signature | None:
    """The signature `dispatcher` (a callee of the program being compiled) has for
    `argtypes` when it is compiled aside, or None: then it is typed (compiled) here."""
    current = getattr(_local, "session", None)
    if current is None or not _leaf_of(dispatcher, current.module):
        return None
    argtypes = tuple(argtypes)
    key = (id(dispatcher), argtypes)
    if key not in current.index:
        if argtypes in dispatcher.overloads:
            return None
        current.entries.append((dispatcher, argtypes))
        k = current.index[key] = len(current.entries) - 1
        if not current.send(k):
            current.entries[k] = (None, None)
            current.index[key] = None
    if current.index[key] is None:
        return None
    return signature(types.none, *argtypes)


def deferred(dispatcher, argtypes) -> bool:
    """Whether `dispatcher` for `argtypes` is compiled aside and not yet registered."""
    current = getattr(_local, "session", None)
    return current is not None and current.index.get((id(dispatcher), tuple(argtypes))) \
        is not None


def declared(name: str, dispatcher, argtypes, register) -> None:
    """A module being lowered calls the deferred `dispatcher` for `argtypes` as `name`:
    `register(dispatcher, argtypes)` once it is compiled, before that module is loaded."""
    current = _local.session
    current.declared.setdefault(name, (current.index[(id(dispatcher), tuple(argtypes))],
                                       register))


_LEAVES: dict = {}


def _leaf_of(dispatcher, module: str) -> bool:
    """`dispatcher` is a stored (cached) function of `module` that returns nothing and names
    none of the module's own functions (a row function or kernel, not a sub-program)."""
    if not isinstance(dispatcher, CPUDispatcher) or isinstance(dispatcher._cache, NullCache):
        return False
    fn = dispatcher.py_func
    if fn.__module__ != module:
        return False
    code = fn.__code__
    leaf = _LEAVES.get(code)
    if leaf is None:
        leaf = _LEAVES[code] = _returns_nothing(code) and not any(
            isinstance(value, CPUDispatcher) and value.py_func.__module__ == module
            for value in (fn.__globals__.get(name) for name in code.co_names))
    return leaf


def _returns_nothing(code) -> bool:
    instructions = list(dis.get_instructions(code))
    for k, ins in enumerate(instructions):
        if ins.opname == "RETURN_CONST" and ins.argval is not None:
            return False
        if ins.opname == "RETURN_VALUE" and not (
                k and instructions[k - 1].opname == "LOAD_CONST"
                and instructions[k - 1].argval is None):
            return False
    return True


def _finalize_final_module(self, _original=codegen.CPUCodeLibrary._finalize_final_module):
    """numba's last step before a module goes to the JIT: its deferred callees first."""
    current = getattr(_local, "session", None)
    if current is not None and current.declared:
        module = self._final_module
        wanted = []
        for name in list(current.declared):
            try:
                module.get_function(name)
            except NameError:
                continue
            wanted.append(name)
        current.resolve(wanted)
    _original(self)


codegen.CPUCodeLibrary._finalize_final_module = _finalize_final_module
