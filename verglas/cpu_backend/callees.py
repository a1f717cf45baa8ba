"""Calls of a program's own functions (row loops, shared kernels, sub-programs) that do not
link the callee's code into the caller.

numba links every callee's LLVM module into its caller's and optimizes and compiles the whole
again: a program calling six row loops compiled each of them twice, the second time as part of
the program (measured on the transformer block: the program's LLVM work 750 -> 320 ms without
them). Here the caller only declares the callee, under a name of its own (`symbol`) that the
callee's machine code is registered as (`llvmlite.binding.add_symbol`); the JIT resolves the
call when it loads the caller. A stored program finds its callees again under the same names:
they come from its cache key, not from numba's per-process counters, and `load` registers them
(from numba's cache) before the program itself is loaded.
"""

from __future__ import annotations

import hashlib
import itertools
import threading

import llvmlite.binding as llvm
from numba.core import cgutils, types
from numba.core.extending import intrinsic

from verglas.cpu_backend import aside

__all__ = ["call_unlinked", "callee_signature", "declare_unlinked", "registered", "load"]

_lock = threading.Lock()
# module name -> [(function name, argument types)] in the order they were registered (a
# callee's callees before it)
_registered: dict[str, list] = {}
_symbols: dict[str, int] = {}  # symbol -> address registered under it in this process
_unique = itertools.count()


def symbol(dispatcher, arg_types) -> str:
    """The name `dispatcher`'s machine code for `arg_types` is called by: the same in every
    process for a stored program's module (`verglas_program_<key>`), unique in this one for
    a program that is not stored."""
    fn = dispatcher.py_func
    module = fn.__module__ or ""
    if not module.startswith("verglas_program_"):  # (not stored: this process alone)
        module = getattr(dispatcher, "_verglas_unique", None)
        if module is None:
            module = dispatcher._verglas_unique = f"local{next(_unique)}"
    digest = hashlib.sha256(str(tuple(arg_types)).encode()).hexdigest()[:16]
    return f"verglas.{module}.{fn.__qualname__}.{digest}"


def _register(dispatcher, arg_types) -> str:
    """Register the machine code of `dispatcher` (compiled for `arg_types`) under its symbol."""
    name = symbol(dispatcher, arg_types)
    cres = dispatcher.overloads[tuple(arg_types)]
    address = cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name)
    if not address:
        raise RuntimeError(f"cpu backend: no machine code for {name}")
    with _lock:
        if _symbols.get(name) != address:
            llvm.add_symbol(name, address)
            _symbols[name] = address
        entries = _registered.setdefault(dispatcher.py_func.__module__ or "", [])
        entry = (dispatcher.py_func.__name__, tuple(arg_types))
        if entry not in entries:
            entries.append(entry)
    return name


def callee_signature(typingctx, fn, argtypes):
    """The signature a call of jitted function type `fn` on `argtypes` resolves to: compiled
    here, or (a row function or kernel) compiled aside while the caller compiles (aside.py)."""
    deferred = aside.defer(fn.dispatcher, argtypes)
    if deferred is not None:
        return deferred
    return typingctx.resolve_function_type(fn, tuple(argtypes), {})


def declare_unlinked(context, builder, dispatcher, sig):
    """The LLVM function of `dispatcher` compiled for `sig` (a resolved call signature), as a
    declaration in the caller's module, its code registered for the JIT to resolve (now, or
    for a callee compiled aside, before the caller's module is loaded)."""
    if aside.deferred(dispatcher, sig.args):
        name = symbol(dispatcher, sig.args)
        aside.declared(name, dispatcher, sig.args, _register)
    else:
        name = _register(dispatcher, sig.args)
    fnty = context.call_conv.get_function_type(sig.return_type, sig.args)
    return cgutils.get_or_insert_function(builder.module, fnty, name)


def call_status(context, builder, fn, sig, values):
    """Call `fn` (declare_unlinked) on `values` of sig.args: (status, result)."""
    return context.call_conv.call_function(builder, fn, sig.return_type, sig.args, values)


@intrinsic
def call_unlinked(typingctx, fn, args):
    """fn(*args) for a jitted function `fn` of the program's module, its code not linked into
    the caller's (see the module's docstring); errors it raises propagate."""
    if not isinstance(fn, types.Dispatcher) or not isinstance(args, types.BaseTuple):
        return None
    callee = callee_signature(typingctx, fn, tuple(args.types))
    if callee is None:
        return None

    def codegen(context, builder, sig, llargs):
        values = [context.cast(builder, builder.extract_value(llargs[1], k), actual, wanted)
                  for k, (actual, wanted) in enumerate(zip(args.types, callee.args))]
        target = declare_unlinked(context, builder, fn.dispatcher, callee)
        status, result = call_status(context, builder, target, callee, values)
        with cgutils.if_unlikely(builder, status.is_error):
            context.call_conv.return_status_propagate(builder, status)
        return result

    return callee.return_type(fn, args), codegen


def registered(module: str) -> list:
    """[(function name, argument types)] registered for the functions of `module`, callees
    first: what `load` needs before the module's program is loaded from numba's cache."""
    with _lock:
        return list(_registered.get(module, ()))


def load(namespace: dict, entries) -> None:
    """Compile (from numba's cache, where stored) and register the functions `entries` of the
    module `namespace`, in order: a program's callees before the program is loaded."""
    for name, arg_types in entries:
        dispatcher = namespace[name]
        dispatcher.compile(tuple(arg_types))
        _register(dispatcher, arg_types)
