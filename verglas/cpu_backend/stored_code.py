"""How numba's cache stores the machine code of a program module's functions (the program,
its sub-programs, row functions and kernels), so that loading it costs little.

numba stores a function's object code with the bitcode of its whole module, and loading it
parses that bitcode and walks it for the symbols it defines. That bitcode serves only to link
the function into a caller, and a program's functions are never linked: their callers call
them by symbol (callees.py). Parsing and walking took ~18 of the 49 ms of the transformer
gradient's warm compile (15 functions). Here such a library is stored with the names it
defines, which are registered on load, and its bitcode, parsed only if a caller ever asks to
link it. Other functions (numba's, verglas's helpers, a user's) are stored as numba does.
"""

from __future__ import annotations

import llvmlite.binding as ll
from numba.core import codegen, compiler

__all__ = ["KIND"]

KIND = "verglas-object"  # (numba raises ValueError on a kind it does not know)
_PROGRAM_MODULES = "verglas_program_"


def _reduce(self, _original=compiler.CompileResult._reduce):
    """numba's reduction of a compile result, with a program function's library stored as
    KIND (its names and bitcode beside its object code)."""
    state = _original(self)
    if not (self.fndesc.modname or "").startswith(_PROGRAM_MODULES):
        return state
    name, kind, data = state[0]
    if kind != "object":
        return state
    object_code, shared_bitcode = data
    module = self.library._get_module_for_linking()
    names = tuple(sorted(value.name for values in (module.functions, module.global_variables)
                         for value in values if not value.is_declaration))
    return ((name, KIND, (object_code, shared_bitcode, names)), *state[1:])


def _unserialize(cls, codegen_, state, _original=codegen.CPUCodeLibrary._unserialize.__func__):
    name, kind, data = state
    if kind != KIND:
        return _original(cls, codegen_, state)
    object_code, shared_bitcode, names = data
    self = codegen_.create_library(name)
    self.enable_object_caching()
    self._set_compiled_object(object_code)
    self._verglas_bitcode = shared_bitcode
    self._finalize_final_module()
    codegen_._engine._defined_symbols.update(names)
    return self


def _module_for_linking(self, _original=codegen.CPUCodeLibrary._get_module_for_linking):
    """numba's module for linking; for a library loaded as KIND, its stored bitcode, parsed
    now."""
    bitcode = getattr(self, "_verglas_bitcode", None)
    if self._shared_module is None and bitcode is not None:
        self._shared_module = ll.parse_bitcode(bitcode)
    return _original(self)


compiler.CompileResult._reduce = _reduce
codegen.CPUCodeLibrary._unserialize = classmethod(_unserialize)
codegen.CPUCodeLibrary._get_module_for_linking = _module_for_linking
