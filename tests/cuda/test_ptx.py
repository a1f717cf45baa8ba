"""Every kernel the CUDA generator emits for a corpus compiles to PTX for sm_90 (PTX ISA <= 9.0,
what a CUDA 13.0 driver loads). Needs numba-cuda with the NVVM and NVRTC wheels, not a GPU;
skipped when they are missing or when this process runs the simulator."""

import re

import pytest

from tests.cuda.conftest import simulator_active
from tests.cuda.corpus import programs

pytestmark = pytest.mark.skipif(simulator_active(), reason="compile_ptx fails under the simulator")


def _compiler():
    try:
        from numba import cuda
        from numba.cuda.cudadrv import nvvm

        nvvm.NVVM()  # raises without libNVVM
        return cuda
    except Exception as exc:
        pytest.skip(f"numba-cuda / NVVM not available: {exc}")


@pytest.mark.parametrize("name,program", programs(), ids=lambda p: p if isinstance(p, str)
                         else "")
def test_every_kernel_compiles_for_sm90(name, program):
    _compiler()
    from verglas.cuda_backend import cache
    from verglas.cuda_backend.codegen import Config, generate
    from verglas.cuda_backend.templates import Arr

    src = generate(program, Config(threads=256))
    assert src.kernels or src.subs, "the corpus program launches kernels"
    for spec in src.all_kernels():
        ptx = cache.compile_spec(spec, (9, 0))
        assert re.search(r"^\.target sm_90\b", ptx, re.M), spec.name
        major, minor = map(int, re.search(r"^\.version (\d+)\.(\d+)", ptx, re.M).groups())
        assert (major, minor) <= (9, 0), f"{spec.name}: PTX ISA {major}.{minor} > 9.0"
        assert cache.entry_name(ptx), spec.name
        # the module is loaded alone (cuModuleLoadData): nothing may stay for a linker to find
        externs = re.findall(r"^\.extern\b.*$", ptx, re.M)
        assert not externs, (spec.name, externs)
        # the flat argument tuple CupyKernel builds has one entry per PTX parameter
        entry = re.search(r"\.entry \w+\((.*?)\)", ptx, re.S).group(1)
        n_params = len(re.findall(r"\.param\b", entry))
        expected = sum(5 + 2 * p.ndim if isinstance(p, Arr) else 1 for p in spec.params)
        assert n_params == expected, (spec.name, n_params, expected)
        assert not src.fallbacks, src.fallbacks
