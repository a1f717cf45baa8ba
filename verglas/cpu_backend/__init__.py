"""The numba CPU backend: one jitted function per Program (kernels, codegen, runtime).

Registered as device "cpu" on import (see verglas/backend.py).
"""

from numba.core.registry import cpu_target

from verglas.backend import register
from verglas.cpu_backend.runtime import CPUBackend


def _initialize_numba() -> None:
    """Set up numba's CPU target now, at import: loading cached machine code or compiling
    otherwise starts by building its typing and lowering registries (a few hundred ms, once per
    process), which belongs to start-up rather than to a user's first compile."""
    cpu_target.typing_context.refresh()
    cpu_target.target_context.refresh()


_initialize_numba()
register(CPUBackend())
