"""Shared elementwise kernels (kernels._emit_elemwise_shared): one jitted function called from
many steps, its one-element inputs passed in groups (a packed-input array or the constant
pool and an offset), and the scheduler's repeats emitted as loops (schedule/repeats.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

import verglas as vg
from tests.cpu_backend.utils import compare_backend, compile_pair, rng


def _source(inputs, outputs) -> str:
    return compile_pair(inputs, outputs)[0]._runner.text


def _program_body(src: str) -> str:
    return src[src.index("def program("):]


def _shared(inputs, outputs) -> str:
    """The program's source, asserting it defines a shared kernel called more than once."""
    src = _source(inputs, outputs)
    kernels = re.findall(r"\ndef (kern\d+)\(", src)
    assert kernels, "no shared kernel"
    return src


def _sum_of_terms(x, coefs, shift=lambda i: i):
    """sum_i coefs[i] * sin(x + shift(i)): one shared kernel, many call sites."""
    acc = coefs[0] * vg.sin(x)
    for i in range(1, len(coefs)):
        acc = acc + coefs[i] * vg.sin(x + shift(i))
    return acc


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_packed_scalars_travel_as_array_and_offset(dtype):
    x = vg.tensor("x", shape=(None,), dtype=dtype)
    a = [vg.scalar(f"a{i}", dtype=dtype) for i in range(80)]
    y = _sum_of_terms(x, a)
    g = rng(1)
    arrays = [g.standard_normal(9).astype(dtype),
              *(np.asarray(v, dtype=dtype) for v in g.standard_normal(80))]
    compare_backend([x, *a], y, arrays, rtol=1e-4 if dtype == "float32" else None)
    src = _shared([x, *a], y)
    body = _program_body(src)
    assert re.search(r"kern\d+, (?:[^()]*, )?\(.*pk0, zo \+ ", body)  # a run of packed inputs: no copies
    assert not re.search(r"\n    h\d+ = pk0\[", body)  # nor one statement per element
    assert "scalars_at" in src  # the kernel unpacks them before its loop


def test_element_reads_of_one_vector_travel_as_array_and_offset():
    # big_graph as users spell it: one coefficient vector, a[i] per term. Its runs of
    # consecutive elements reach the shared kernel as the vector and an offset, so the kernel's
    # terms reroll into one loop: compile time no longer grows with the terms of a group.
    x = vg.tensor("x", shape=(None,), dtype="float64")
    a = vg.tensor("a", shape=(90,), dtype="float64")
    y = _sum_of_terms(x, [a[i] for i in range(90)])
    g = rng(3)
    compare_backend([x, a], y, [g.standard_normal(9), g.standard_normal(90)])
    src = _shared([x, a], y)
    body = _program_body(src)
    assert re.search(r"kern\d+, (?:[^()]*, )?\(.*in1, zo \+ \d+", body)
    assert not re.search(r"\bin1\[\d+\], in1\[", body)  # no element passed one by one
    assert src.count("raise_if_IndexError") == 0  # the static shape proves every index


def test_constants_only_come_from_the_pool():
    x = vg.tensor("x", shape=(None,), dtype="float64")
    y = [vg.exp(vg.sin(x + float(i)) * float(i + 2) - float(i)) for i in range(8)]
    arrays = [rng(2).standard_normal(11)]
    compare_backend([x], y, arrays)
    body = _program_body(_shared([x], y))
    assert "kq0 = kpool" in body and re.search(r"kern\d+, (?:[^()]*, )?\(.*kq0, zo \+ ", body)


# 90 terms: three fused steps of 30, the last two calling one shared kernel; 150 terms: four
# more blocks of steps, which the scheduler makes one loop (a repeat), its coefficients read by
# iteration from tables


@pytest.mark.parametrize("terms", [90, 150])
def test_scalars_out_of_order_are_gathered(terms):
    # in order at the kernel's first call sites, reversed later: no run of consecutive
    # packed elements there, so those call sites gather them into an array
    half = terms // 2
    x = vg.tensor("x", shape=(None,), dtype="float64")
    a = [vg.scalar(f"a{i}") for i in range(terms)]
    y = _sum_of_terms(x, a[:half] + a[half:][::-1])
    g = rng(3)
    arrays = [g.standard_normal(5), *(np.asarray(v) for v in g.standard_normal(terms))]
    compare_backend([x, *a], y, arrays)
    if terms == 90:
        assert re.search(r"\n    sv\d+ = empty\d+\(", _shared([x, *a], y))
    # reversed from the start: passed one by one
    y = _sum_of_terms(x, a[::-1])
    compare_backend([x, *a], y, arrays)
    if terms == 90:
        _shared([x, *a], y)


@pytest.mark.parametrize("terms", [90, 150])
def test_mixed_scalar_sources_in_one_kernel(terms):
    # the same op fed by packed inputs, computed 0-d values and constants at different sites
    x = vg.tensor("x", shape=(None,), dtype="float64")
    a = [vg.scalar(f"a{i}") for i in range(terms)]
    coefs = [vg.exp(a[i]) if i in (67, 100) else a[i] for i in range(terms)]
    y = _sum_of_terms(x, coefs)
    g = rng(4)
    arrays = [g.standard_normal(6), *(np.asarray(v) for v in g.standard_normal(terms))]
    compare_backend([x, *a], y, arrays)
    if terms == 90:
        assert re.search(r"\n    sv\d+ = empty\d+\(", _shared([x, *a], y))


def test_int64_shared_kernels():
    x = vg.tensor("x", shape=(None,), dtype="int64")
    a = [vg.scalar(f"a{i}", dtype="int64") for i in range(90)]
    acc = a[0] * x
    for i in range(1, 90):
        acc = acc + a[i] * (x + i) * (x - 2 * i)
    g = rng(5)
    arrays = [g.integers(-50, 50, 13), *(np.asarray(v) for v in g.integers(-9, 9, 90))]
    compare_backend([x, *a], acc, arrays)
    _shared([x, *a], acc)


def test_shared_kernels_on_matrices_with_broadcasting():
    x = vg.tensor("x", shape=(None, 3), dtype="float64")
    b = vg.tensor("b", shape=(3,), dtype="float64")
    a = [vg.scalar(f"a{i}") for i in range(90)]
    acc = a[0] * vg.sin(x + b)
    for i in range(1, 90):
        acc = acc + a[i] * vg.sin(x + b * float(i))
    g = rng(6)
    arrays = [g.standard_normal((4, 3)), g.standard_normal(3),
              *(np.asarray(v) for v in g.standard_normal(90))]
    compare_backend([x, b, *a], acc, arrays)
    arrays[0] = np.asfortranarray(g.standard_normal((5, 3)))
    compare_backend([x, b, *a], acc, arrays)
    _shared([x, b, *a], acc)


def test_zero_d_program_with_many_scalars():
    a = [vg.scalar(f"a{i}") for i in range(40)]
    xs = vg.scalar("x")
    y = _sum_of_terms(xs, a)
    g = rng(7)
    arrays = [np.asarray(g.standard_normal()), *(np.asarray(v) for v in g.standard_normal(40))]
    compare_backend([xs, *a], y, arrays)


def test_big_sum_is_one_loop_of_repeated_blocks_and_right():
    x = vg.tensor("x", shape=(None,), dtype="float64")
    a = [vg.scalar(f"a{i}") for i in range(300)]
    y = _sum_of_terms(x, a)
    g = rng(8)
    arrays = [g.standard_normal(17), *(np.asarray(v) for v in g.standard_normal(300))]
    compare_backend([x, *a], y, arrays)
    f = compile_pair([x, *a], y)[0]
    (rep,) = f.program.repeats
    assert rep.count >= 8 and rep.varying  # the coefficients are read by iteration
    body = _program_body(f._runner.text)
    assert re.search(r"\n    for rp\d+ in range\(\d+\):", body)
    # the varying packed inputs: one gather of each dtype, no statement per coefficient
    assert re.search(r"rv\d+ = pk0\[(rvi\d+|\d+:\d+)\]\.reshape", body)
    assert len(re.findall(r"= pk0\[", body)) <= 2
    # the terms inside each fused loop are a loop too (scalar_code.term_runs): a few
    # statements, not hundreds
    src = _source([x, *a], y)
    assert re.search(r"\n        +for c\d+ in range\(\d+\):  # \d+ like terms", src)
    assert src.count("f_sin") < 10


_WARM_SCRIPT = """
import numpy as np, verglas as vg
x = vg.tensor("x", shape=(None,))
a = [vg.scalar(f"a{i}") for i in range(150)]
y = a[0] * vg.sin(x)
for i in range(1, 150):
    y = y + a[i] * vg.sin(x + i)
f = vg.compile([x, *a], y)
assert "for rp0 in range(" in f._runner.text and "scalars_at" in f._runner.text
xv, av = np.linspace(-2, 2, 7), [np.float64(i % 5 - 2) for i in range(150)]
assert np.allclose(f(xv, *av), sum(av[i] * np.sin(xv + i) for i in range(150)))
print("ok")
"""


def test_a_second_process_loads_shared_kernels_from_the_cache(tmp_path):
    # the intrinsic, the constant pool and the repeat's tables are found again by name
    env = dict(os.environ, VERGLAS_CACHE_DIR=str(tmp_path / "v"),
               NUMBA_CACHE_DIR=str(tmp_path / "n"))
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", _WARM_SCRIPT], env=env, text=True,
                             capture_output=True, timeout=300)
        assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
    assert list(tmp_path.rglob("runner.pkl"))


@pytest.mark.parametrize("spelling", ["scalars", "indexed"])
def test_generated_code_grows_at_most_linearly_with_the_terms(spelling):
    # the source numba must type, read without compiling it: per term a constant share of a
    # kernel call at most, whichever way the coefficients are spelled
    from verglas.cpu_backend.codegen import generate
    from tests.schedule.test_scheduler import program_of

    sizes = {}
    for terms in (100, 400):
        x = vg.tensor("x", shape=(None,), dtype="float64")
        if spelling == "indexed":
            a = vg.tensor("a", shape=(terms,), dtype="float64")
            inputs, coefs = [x, a], [a[i] for i in range(terms)]
        else:
            coefs = [vg.scalar(f"a{i}") for i in range(terms)]
            inputs = [x, *coefs]
        program = program_of(inputs, [_sum_of_terms(x, coefs)])
        text = generate(program).text  # (the specialized variant)
        sizes[terms] = (len(program.steps), text.count("\n"), text.count("f_sin"))
    (steps1, lines1, sins1), (steps4, lines4, sins4) = sizes[100], sizes[400]
    assert steps4 <= 4 * steps1 + 2 and lines4 <= 4 * lines1
    assert sins4 == sins1  # the terms are loops: sin is spelled a fixed number of times
