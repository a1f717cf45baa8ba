"""A program's functions in numba's cache (cpu_backend/stored_code.py): stored with the names
they define, loaded without parsing their bitcode, which a caller linking them still gets."""

import os
import subprocess
import sys

import numba
import numpy as np

import verglas as vg
from verglas.cpu_backend.stored_code import KIND


def test_a_program_function_is_stored_with_its_names_and_others_as_numba_does(tmp_path):
    x = vg.tensor("x", shape=(None,), dtype="float64")
    vg.config.cache_dir = tmp_path
    try:
        f = vg.compile([x], [vg.exp(x) * 2.0])
    finally:
        del vg.config.cache_dir
    (cres,) = f._runner.jitted.overloads.values()
    name, kind, (objects, bitcode, names) = cres._reduce()[0]
    assert kind == KIND and cres.fndesc.llvm_func_name in names and bitcode

    @numba.njit
    def plain(v):
        return v + 1.0
    plain(1.0)
    (other,) = plain.overloads.values()
    assert other._reduce()[0][1] == "object"


_LOAD = """
import numpy as np, verglas as vg
x = vg.tensor("x", shape=(None,), dtype="float64")
f = vg.compile([x], [vg.exp(x) * 2.0, vg.softmax(x)])
v = np.linspace(-3, 3, 50)
(got, soft) = f(v)
assert np.allclose(got, np.exp(v) * 2.0, rtol=1e-14) and np.allclose(soft.sum(), 1.0)
(cres,) = f._runner.jitted.overloads.values()
library = cres.library
print(int(library._shared_module is None and library._verglas_bitcode is not None), end=" ")
module = library._get_module_for_linking()  # (a caller linking it: parsed now)
print(int(any(fn.name == cres.fndesc.llvm_func_name and not fn.is_declaration
              for fn in module.functions)))
"""


def test_a_loaded_program_parses_its_bitcode_only_when_linked(tmp_path):
    env = dict(os.environ, VERGLAS_CACHE_DIR=str(tmp_path))

    def run() -> str:
        out = subprocess.run([sys.executable, "-c", _LOAD], env=env, text=True,
                             capture_output=True, timeout=600, cwd=os.getcwd())
        assert out.returncode == 0, out.stderr[-3000:]
        return out.stdout.strip().splitlines()[-1]

    assert run() == "0 1"  # compiled here
    assert run() == "1 1"  # loaded from numba's cache
