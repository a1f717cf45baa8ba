"""A program's row functions and kernels compiled in a second process while the program
itself compiles (verglas/compile_helper.py): numba compiles one function at a time.

Typing the program needs no more of such a callee than its signature: it returns nothing and
calls none of the program's own functions (a leaf). Its machine code is needed only when the
JIT loads the program, which finds it by its symbol (callees.py). So while a stored program
types, lowers and optimizes here, a helper process forked at its first leaf call compiles the
leaves, in the order the typing meets them, into numba's on-disk cache (a stored program's
functions are cached); before a module that calls them is handed to the JIT, `resolve`
compiles here the leaves the helper has not started (the last first), waits for the others,
loads them from the cache and registers their symbols. A leaf the helper failed to compile is
compiled here.

Elsewhere (compile_helper.available), and for programs that are not stored, leaves compile
where they are called, as before.
"""

from __future__ import annotations

import contextlib
import dis
import sys
import threading

from numba.core import codegen, types
from numba.core.caching import NullCache
from numba.core.registry import CPUDispatcher
from numba.core.typing import signature

from verglas.compile_helper import CompileHelper, available

__all__ = ["session", "defer", "deferred", "declared", "leaf_of"]

_local = threading.local()


class _Session:
    """The leaves of one program compile: deferred, sent to the helper, declared, resolved."""

    def __init__(self, module: str):
        self.module = module
        self.entries: list[tuple] = []  # (dispatcher, argtypes)
        self.index: dict[tuple, int | None] = {}  # (id(dispatcher), argtypes) -> entry index
        self.declared: dict[str, tuple] = {}  # symbol -> (entry index, register)
        self.helper = CompileHelper(_compiler(module))

    def resolve(self, symbols) -> None:
        """Compile (from the cache, where the helper stored them) and register the entries of
        `symbols`."""
        todo = [self.declared.pop(name) for name in symbols if name in self.declared]
        for k, _ in reversed(todo):  # (the helper works from the first)
            if self.helper.take(k):
                dispatcher, argtypes = self.entries[k]
                dispatcher.compile(argtypes)
        self.helper.wait([k for k, _ in todo])
        for k, register in todo:
            dispatcher, argtypes = self.entries[k]
            dispatcher.compile(argtypes)  # (a cache load where the helper compiled it)
            register(dispatcher, argtypes)


def _compiler(module: str):
    """The helper's work: compile function `name` of `module` for `argtypes` (numba stores
    it in the cache)."""
    def work(payload):
        _local.session = None  # (in the helper: it compiles leaves, nothing is deferred)
        name, argtypes = payload
        sys.modules[module].__dict__[name].compile(argtypes)
    return work


@contextlib.contextmanager
def session(module: str):
    """Compile the leaves of the stored program module `module` aside while the body runs
    (the program's compile); nothing when helpers are not available."""
    if getattr(_local, "session", None) is not None or not available():
        yield
        return
    current = _local.session = _Session(module)
    try:
        yield
        current.resolve(list(current.declared))  # (declared but never loaded: registered)
    finally:
        _local.session = None
        current.helper.close()


def defer(dispatcher, argtypes) -> signature | None:
    """The signature `dispatcher` (a callee of the program being compiled) has for
    `argtypes` when it is compiled aside, or None: then it is typed (compiled) here."""
    current = getattr(_local, "session", None)
    if current is None or not leaf_of(dispatcher, current.module):
        return None
    argtypes = tuple(argtypes)
    key = (id(dispatcher), argtypes)
    if key not in current.index:
        if argtypes in dispatcher.overloads:
            return None
        current.entries.append((dispatcher, argtypes))
        k = len(current.entries) - 1
        sent = current.helper.send(k, (dispatcher.py_func.__name__, argtypes))
        current.index[key] = k if sent else None
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


def leaf_of(dispatcher, module: str) -> bool:
    """`dispatcher` is a stored (cached) function of `module` that returns nothing and names
    none of the module's own functions (a row function or kernel, not a sub-program)."""
    if not isinstance(dispatcher, CPUDispatcher) or isinstance(dispatcher._cache, NullCache):
        return False
    fn = dispatcher.py_func
    if fn.__module__ != module:
        return False
    leaf = getattr(dispatcher, "_verglas_leaf", None)  # (found once, kept with it)
    if leaf is None:
        code = fn.__code__
        leaf = dispatcher._verglas_leaf = _returns_nothing(code) and not any(
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
