"""CUDA code generation without a device: structure, launch plans, import hygiene, errors."""

import re
import subprocess
import sys

import numpy as np
import pytest

import verglas as vg
from tests.cuda.conftest import simulator_active
from tests.cuda.corpus import programs
from verglas.cuda_backend import host
from verglas.cuda_backend.codegen import Config, generate


def test_import_verglas_imports_neither_cupy_nor_numba_cuda():
    code = ("import sys, verglas, verglas.cuda_backend.codegen, verglas.cuda_backend.runtime; "
            "print(sorted(m for m in sys.modules if m.startswith(('cupy', 'numba.cuda'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.skipif(simulator_active(), reason="the simulator is a usable device")
def test_no_device_is_a_clear_runtime_error():
    x = vg.tensor("x", (None,))
    with pytest.raises(RuntimeError, match="device='cuda' needs an NVIDIA GPU"):
        vg.compile([x], x + 1, device="cuda")


def test_corpus_generates_without_fallbacks():
    for name, program in programs():
        src = generate(program, Config(threads=64))
        assert not src.fallbacks, (name, src.fallbacks)
        compile(src.text, name, "exec")
        for sub in src.subs.values():
            compile(sub.text, name, "exec")
        for spec in src.all_kernels():
            compile(spec.source, spec.name, "exec")


def test_inner_graphs_run_on_the_device_not_by_their_perform():
    """An OpFromGraph is a call of its sub-program's host function (one per distinct op, its
    kernels shared by every use); a Scan is a host-driven loop of its body's calls. No step
    runs a reference perform on host copies, and without a stopping condition the program
    stays capturable as a CUDA graph."""
    program = dict(programs())["inner_graphs"]
    src = generate(program, Config(threads=64))
    assert not src.fallbacks and not src.syncs
    calls = re.findall(r"= (S\d+)\(L, ", src.text)
    assert len(calls) == 2 and len(set(calls)) == 1, src.text  # the layer, used twice
    assert src.text.count("H.run_scan(L, ") == 2, src.text  # the loop and its pullback
    assert len(src.subs) == 3


def test_elementwise_chain_is_one_kernel_pair_and_reduce_of_map_fuses():
    x = vg.tensor("x", (None, None), "float32")
    from verglas.function import _optimize
    from verglas.schedule import lower

    src = generate(lower(_optimize([x], [vg.sum(vg.exp(x) * 2 + 1, axis=0)], "fast_run")))
    assert "fused into step" in src.text
    assert [s.name.split("_")[1] for s in src.kernels] == ["rows", "cols", "final"]
    assert src.capturable


def test_row_groups_are_one_kernel():
    """The scheduler's row groups (softmax, logsumexp, a row sum of a map) run as one kernel
    each; with rows short enough for the threads' registers, a variant that reads the input
    once."""
    x = vg.tensor("x", (None, None), "float32")
    from verglas.function import _optimize
    from verglas.schedule import lower

    for out, launches in ((vg.sum(vg.exp(x) * 2 + 1, axis=1), 1), (vg.softmax(x, axis=1), 1),
                          (vg.logsumexp(x, axis=1), 1)):
        program = lower(_optimize([x], [out], "fast_run"))
        assert len(program.groups) == 1 and program.n_kernels() == launches
        src = generate(program, Config(threads=64))
        assert src.text.count("one row kernel") == 1
        names = [s.name for s in src.kernels]
        assert all(n.split("_", 1)[1].startswith("rows") for n in names), names
        assert src.capturable
    cached = [s for s in src.kernels if s.name.endswith("cached")]
    assert cached and "cuda.local.array" in cached[0].source  # logsumexp: x held, read once


class _FakeLauncher:
    xp = np
    threads = 32
    max_blocks = 4

    def __init__(self):
        self.calls = []

    def empty(self, shape, dtype):
        return np.empty(shape, dtype)


@pytest.mark.parametrize("shape,axis,expect", [
    ((6, 5), (1,), "rows"),      # short rows: groups of 8 threads, 4 rows per block
    ((1, 300), (1,), "split"),   # one long row: split over blocks, then a final pass
    ((5, 40), (0,), "cols"),     # reduced axis outermost, many outputs: a thread per output
])
def test_reduce_launch_plans(shape, axis, expect):
    L = _FakeLauncher()
    calls = []
    x = np.ones(shape, "float32")
    kept = [a for a in range(2) if a not in axis]
    view = x.transpose(kept + list(axis))
    m, k = view.shape[0], view.shape[1]
    dest = np.empty(m, "float32")
    host.run_reduce(L, lambda *a: calls.append(("rows", a)), lambda *a: calls.append(("cols", a)),
                    lambda *a: calls.append(("final", a)), dest, (view,), view, 1, m, k,
                    "float32")
    kinds = [c[0] for c in calls]
    if expect == "split":
        assert kinds == ["rows", "final"]
        assert calls[0][1][-1] > 1  # S splits
    else:
        assert kinds == [expect]


def test_map_views_merge_contiguous_dims():
    L = _FakeLauncher()
    L.as_strided = lambda a, shape, strides: np.lib.stride_tricks.as_strided(a, shape, strides)
    a = np.zeros((2, 3, 4))
    b = np.zeros((1, 3, 4))
    va, vb = host.map_views(L, (2, 3, 4), [a, b])
    assert va.shape == (1, 2, 12) and vb.strides == (0, 0, 8)


def test_the_same_kernel_is_one_spec_in_every_step_and_program():
    """Kernels are named after what they compute (templates.by_content): two steps doing the
    same work share one kernel, and another program generating it has the same spec (one
    compile, one cache entry); scalar ops with an expression are written inline (a nested
    def per op cost numba-cuda's compile ~0.1 s a kernel)."""
    from verglas.function import _optimize
    from verglas.schedule import lower

    def kernels(build):
        x, y = vg.tensor("x", (None,), "float32"), vg.tensor("y", (None,), "float32")
        return list(generate(lower(_optimize([x, y], build(x, y), "fast_run")),
                             Config(threads=64)).all_kernels())

    both = kernels(lambda x, y: [vg.tanh(x) * 2.0, vg.tanh(y) * 2.0])
    one = kernels(lambda x, y: [vg.tanh(x) * 2.0])
    assert {s.fingerprint for s in both} == {s.fingerprint for s in one}
    assert all(re.fullmatch(r"k[0-9a-f]{12}_\w+", s.name) for s in both)
    assert not any("def s_" in s.source for s in both)
    summed = kernels(lambda x, y: [vg.sum(x * y), vg.sum(y * x) + 1])
    assert len({s.name.split("_")[0] for s in summed}) == len(summed)
