"""The backend protocol and its registry: a device name -> the Backend that runs programs there.

`compile()` asks `select(device, mode)` for a Backend, and the Backend for a Runner of what was
built: the scheduled Program, or the optimized frozen graph where the backend does not lower
(the reference executor). A Runner offers the call, the acceptance of device arrays it takes
without a copy, a fast call (optional) and `source()`, the code that runs. `Function` knows no
backend by name.

A backend is a package (or module) `verglas/<name>_backend` that registers a Backend when it
is imported; `import verglas` imports every such module, so adding a backend is one new package.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Callable

from verglas.graph.types import TensorType
from verglas.rewrite import MODES as REWRITE_MODES
from verglas.rewrite import Mode

__all__ = ["Backend", "Runner", "register", "select", "devices", "modes", "gc_paused"]

_gc_lock = threading.Lock()
_gc_pausers = 0  # compiles under way that paused the collector (it resumes after the last)


@contextlib.contextmanager
def gc_paused():
    """Python's cyclic garbage collector paused for a compile: numba's passes create millions
    of objects, and the collections they trigger scan them again and again (measured: 13% of a
    transformer gradient's program compile). The garbage they leave is collected later. A
    collector the application turned off stays off."""
    global _gc_pausers
    with _gc_lock:
        if _gc_pausers == 0 and not gc.isenabled():
            paused = False
        else:
            paused = True
            _gc_pausers += 1
            gc.disable()
    try:
        yield
    finally:
        if paused:
            with _gc_lock:
                _gc_pausers -= 1
                if _gc_pausers == 0:
                    gc.enable()


class Runner:
    """What a Backend hands a Function: called with the inputs, it returns the outputs."""

    # the inputs it takes are writable C-contiguous numpy arrays (Function copies others)
    contiguous: bool = False

    def __call__(self, args: list) -> list:
        """The outputs (a list) for `args`: one value per input, each a numpy array of its
        input's dtype and ndim, or what `accept` returned for it."""
        raise NotImplementedError

    def accept(self, ttype: TensorType, value, label: str):
        """`value`, a device array given for an input of type `ttype`, as this runner takes it
        (zero copy where it can), checked like `TensorType.filter` (errors name `label`); None
        where the runner takes numpy arrays only (Function copies the value to the host)."""
        return None

    def fast_call(self, specs: list, single: bool, checked: Callable) -> Callable | None:
        """A callable doing `f(*args)` for the Function with inputs `specs` ([(numpy dtype,
        ndim, static shape or None)]) and one output (`single`) or a list of them, which hands
        anything it does not take to `checked`; None: the Function calls `checked`."""
        return None

    def source(self) -> str:
        """The code that runs, readable on its own (or, where none is generated, what runs)."""
        raise NotImplementedError


class Backend:
    """Turns what `compile()` built into a Runner; registered under its `name`."""

    name: str = ""  # the device name it is registered under (and its cache directory)
    # a mode it owns: compile(mode=<it>) runs the graph as written on this backend, whatever
    # the device (mode="reference": the reference executor)
    mode: str | None = None
    lowers: bool = True  # it runs the scheduled Program (else the optimized frozen graph)
    # the Program variants it runs (schedule/variants.py): the specialized one first, the
    # general one for calls that broadcast at run time; or the general one alone
    variants: tuple[str, ...] = ("specialized", "general")

    def program(self, program):
        """The variant of the scheduler's `program` this backend runs first."""
        return program if self.variants[0] == program.variant else program.general()

    def runner(self, code_of: Callable[[], object], key: str | None,
               input_types: list[TensorType]) -> Runner:
        """A Runner of the Program (or frozen graph) `code_of()` returns, whose inputs have
        `input_types`; with a cache `key`, the backend may store its code and load it again
        (a warm start that loads stored code need not call `code_of`)."""
        raise NotImplementedError

    def __repr__(self):
        return f"<{type(self).__name__} {self.name!r}>"


_BACKENDS: dict[str, Backend] = {}
_MODE_OWNERS: dict[str, Backend] = {}


def register(backend: Backend) -> Backend:
    """Make `backend` the one of device `backend.name` (and of its own mode, if it has one)."""
    if not backend.name:
        raise ValueError(f"{backend!r}: a backend needs a name")
    _BACKENDS[backend.name] = backend
    if backend.mode is not None:
        _MODE_OWNERS[backend.mode] = backend
    return backend


def devices() -> tuple[str, ...]:
    """The device names backends are registered under."""
    return tuple(_BACKENDS)


def modes() -> tuple[str, ...]:
    """The mode names `compile()` takes: the rewrite modes, then the modes backends own."""
    return (*REWRITE_MODES, *(m for m in _MODE_OWNERS if m not in REWRITE_MODES))


def select(device: str, mode) -> tuple[Backend, bool]:
    """The Backend running a program compiled for `device` in `mode`, and whether the graph is
    rewritten first: a mode a backend owns runs the graph as written on that backend; any other
    mode (a name or a rewrite Mode) selects rewrites, and the device selects the backend."""
    backend = _BACKENDS.get(device) if isinstance(device, str) else None
    if backend is None:
        raise ValueError(f"compile: device must be one of {devices()}, not {device!r}")
    if isinstance(mode, str) and mode in _MODE_OWNERS:
        return _MODE_OWNERS[mode], False
    if not (isinstance(mode, Mode) or isinstance(mode, str) and mode in REWRITE_MODES):
        raise ValueError(f"compile: mode must be one of {modes()} or a rewrite Mode, "
                         f"not {mode!r}")
    return backend, True
