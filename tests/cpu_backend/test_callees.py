"""A program's own functions (row loops, shared kernels, sub-programs) are called without their
code linked into the caller's (cpu_backend/callees.py), in this process and from the cache."""

import os
import re
import subprocess
import sys

import numpy as np

import verglas as vg
from tests.cpu_backend.utils import rng


def _program():
    x = vg.tensor("x", shape=(None, None), dtype="float64")
    y = vg.tensor("y", shape=(None, None), dtype="float64")
    a = vg.tensor("a", shape=(None, None), dtype="float64")
    b = vg.tensor("b", shape=(None, None), dtype="float64")
    op = vg.OpFromGraph([a, b], [vg.exp(a) @ b, vg.sum(a * b, axis=0)])
    p, q = op(x, y)
    r, s = op(x.T, y[::-1])
    return [x, y], [vg.softmax(p + r), q, s, vg.tanh(x) * 2 + 1, vg.tanh(y) * 2 + 1]


def test_callees_are_declared_in_the_program_not_linked_into_it(tmp_path):
    inputs, outputs = _program()
    vg.config.cache_dir = tmp_path  # (compiled here: its LLVM module can be read)
    try:
        f = vg.compile(inputs, outputs)
    finally:
        del vg.config.cache_dir
    source = f.source()
    names = re.findall(r"^def (\w+)", source, re.M)
    assert {"sub0", "rows0", "kern0", "program"} <= set(names)
    runner = f._runner
    (cres,) = runner.jitted.overloads.values()
    ir = cres.library.get_llvm_str()
    declared = set(re.findall(r'^declare .*@"?(verglas\.[^"(]+)', ir, re.M))
    # the sub-program (twice called: one declaration), the kernel and the row loop's body
    assert {n.split(".")[-2] for n in declared} >= {"sub0", "kern0", "rows0"}, declared
    assert not re.search(r'^define .*@"?verglas\.', ir, re.M)
    xv, yv = rng(0).standard_normal((6, 6)), rng(1).standard_normal((6, 6))
    ref = vg.compile(inputs, outputs, mode="reference")
    for got, want in zip(f(xv, yv), ref(xv, yv)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


_SCRIPT = """
import numpy as np, verglas as vg
from tests.cpu_backend.test_callees import _program
inputs, outputs = _program()
f = vg.compile(inputs, outputs)
g = np.random.default_rng(0)
xv, yv = g.standard_normal((7, 7)), g.standard_normal((7, 7))
ref = vg.compile(inputs, outputs, mode="reference")
assert all(np.allclose(a, b, rtol=1e-12, atol=1e-12) for a, b in zip(f(xv, yv), ref(xv, yv)))
print(sum(f._runner.jitted.stats.cache_hits.values()))
"""


def _run(env) -> int:
    out = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, text=True,
                         capture_output=True, timeout=600, cwd=os.getcwd())
    assert out.returncode == 0, out.stderr[-3000:]
    return int(out.stdout.strip().splitlines()[-1])


def test_a_second_process_registers_the_callees_then_loads_the_program(tmp_path):
    env = dict(os.environ, VERGLAS_CACHE_DIR=str(tmp_path))
    assert _run(env) == 0  # compiled
    (record,) = tmp_path.rglob("callees.pkl")
    assert _run(env) == 1  # loaded from numba's cache, its callees registered first
    # without the record, the stored program is compiled again (never loaded with calls that
    # nothing would resolve), and the record written again
    record.unlink()
    assert _run(env) == 0
    assert record.exists()
    assert _run(env) == 1


_NESTED = """
import numpy as np, verglas as vg
x = vg.tensor("x", shape=(None, None), dtype="float64")
a = vg.tensor("a", shape=(None, None), dtype="float64")
op = vg.OpFromGraph([a], [vg.softmax(a * 2.0, axis=1)])
f = vg.compile([x], [op(x) + op(x.T)])
xv = np.random.default_rng(0).standard_normal((7, 7))
ref = vg.compile([x], [op(x) + op(x.T)], mode="reference")
assert np.allclose(f(xv)[0], ref(xv)[0], rtol=1e-12, atol=1e-12)
print(sum(f._runner.jitted.stats.cache_hits.values()))
"""


def test_without_the_record_a_callee_that_calls_others_compiles_again(tmp_path):
    """The sub-program calls its row loop's function: loaded from numba's cache while the
    program compiles again (no record), it met a call nothing resolved (LLVM aborted the
    process: 'Symbol not found')."""
    env = dict(os.environ, VERGLAS_CACHE_DIR=str(tmp_path))

    def run() -> int:
        out = subprocess.run([sys.executable, "-c", _NESTED], env=env, text=True,
                             capture_output=True, timeout=600, cwd=os.getcwd())
        assert out.returncode == 0, out.stderr[-3000:]
        return int(out.stdout.strip().splitlines()[-1])

    assert run() == 0
    (record,) = tmp_path.rglob("callees.pkl")
    record.unlink()
    assert run() == 0
    assert run() == 1
