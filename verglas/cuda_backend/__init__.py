"""CUDA backend: kernels generated as numba.cuda Python source, run through cupy on a GPU or
through numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1) without one.

Registered as device "cuda" on import (see verglas/backend.py). Importing this package imports
neither its code generator nor numba.cuda nor cupy: the runtime loads them when a Function
with device="cuda" is built.
"""

from verglas.backend import Backend, register


class CUDABackend(Backend):
    """numba.cuda kernels and a Python host function per Program (see runtime.py)."""

    name = "cuda"
    variants = ("general",)  # every kernel broadcasts at run time (no specialized code)

    def runner(self, code_of, key, input_types):
        # loaded when a program asks for it: most processes never run the CUDA backend
        from verglas.cuda_backend.runtime import build_runner

        return build_runner(code_of(), key)


register(CUDABackend())
