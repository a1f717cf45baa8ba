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


def test_the_helper_takes_kernels_from_the_programs_end_strided_ones_last(tmp_path,
                                                                          monkeypatch):
    """cache.Ahead's order for the helper: the first call asks for kernels from the program's
    start, so the helper starts from its end (mlp_grad's first call: 1.30-1.40 -> 1.11-1.31 s
    of compile_ptx); strided (`_map`) kernels, which a call with contiguous inputs never runs,
    come last."""
    from verglas import compile_helper
    from verglas import config as vg_config
    from verglas.cuda_backend import cache
    from verglas.cuda_backend.templates import KernelSpec

    if not compile_helper.available():
        pytest.skip("needs fork and two CPUs")
    monkeypatch.setattr(vg_config, "cache_dir", tmp_path)
    names = ["k0_flat", "k1_map", "k2_rows", "k3_flat", "k4_map", "k5_cols"]
    specs = [KernelSpec(n, f"def {n}(a):\n    pass\n", ()) for n in names]
    ahead = cache.Ahead(specs, (9, 0))
    try:
        assert [s.name for s in ahead.todo] == ["k5_cols", "k3_flat", "k2_rows", "k0_flat",
                                                 "k4_map", "k1_map"]
    finally:
        ahead.close()


def test_kernels_compiled_ahead_by_a_helper_process_are_the_same(tmp_path, monkeypatch):
    """cache.Ahead: a forked helper compiles a program's kernels from its end while this
    process asks for them from its start, as a first call launches them; every kernel's PTX
    is the one compiled alone, each kernel is compiled once, and the helper did its share."""
    from verglas import compile_helper
    from verglas import config as vg_config
    from verglas.cuda_backend import cache
    from verglas.cuda_backend.codegen import Config, generate

    _compiler()
    if not compile_helper.available():
        pytest.skip("needs fork and two CPUs")
    name, program = max(programs(), key=lambda p: len(list(generate(p[1], Config()).all_kernels())))
    specs = list({s.fingerprint: s for s in generate(program, Config()).all_kernels()}.values())
    assert len(specs) >= 3, name
    compiled = []
    compile_spec = cache.compile_spec
    monkeypatch.setattr(cache, "compile_spec",
                        lambda spec, cc: compiled.append(spec.fingerprint) or
                        compile_spec(spec, cc))
    monkeypatch.setattr(vg_config, "cache_dir", tmp_path)
    ahead = cache.Ahead(specs, (9, 0))
    try:
        assert ahead.helper is not None
        got = {s.fingerprint: ahead.ptx(s) for s in specs}
        reports = dict(ahead.helper.reports)
    finally:
        ahead.close()
    helped = {ahead.todo[k].fingerprint for k, ok in reports.items() if ok}
    here = set(compiled)  # (this process's compiles: the helper's are in its own memory)
    assert helped and not helped & here and helped | here == set(got)
    for spec in specs:
        alone = compile_spec(spec, (9, 0))
        # (numba numbers its functions and shared arrays per process: names with digits)
        strip = (lambda t: re.sub(r"[A-Za-z_$][\w$]*\d[\w$]*", "N", re.sub(r"//.*", "", t)))
        assert strip(got[spec.fingerprint]) == strip(alone), spec.name
