"""scalar_code: the term runs of scalar graphs (an accumulation of like terms is found from the
graph itself, as one run whose leaves say what each term reads) and, on the CPU, the loops
generated code writes for them, checked against numpy."""

import re

import numpy as np
import pytest

import verglas as vg
from verglas.graph import ScalarType
from verglas.graph.basic import Constant, intern_constant
from verglas.ops import scalar as s
from verglas.ops.composite import Composite, scalar_apply, scalar_variable
from verglas.scalar_code import MIN_TERMS, TermLoops, term_runs
from tests.cpu_backend.utils import compare_backend, compile_pair


def _apply(op, *args):
    return scalar_apply(op, list(args)).outputs[0]


def _sum_graph(n_terms, shift=lambda k: float(k), extra_outputs=()):
    """x, c_1..c_n -> sum_k c_k * sin(x + shift(k)) as a scalar graph, plus the nodes named by
    `extra_outputs` (term k's value "t<k>" or the accumulator after term k "a<k>")."""
    x = scalar_variable("float64")
    cs = [scalar_variable("float64") for _ in range(n_terms)]
    named = {}
    acc = _apply(s.Mul(), cs[0], _apply(s.Sin(), x))
    for k in range(1, n_terms):
        term = _apply(s.Mul(), cs[k], _apply(s.Sin(), _apply(s.Add(), x, _const(shift(k)))))
        acc = _apply(s.Add(), acc, term)
        named[f"t{k}"], named[f"a{k}"] = term, acc
    graph = Composite.from_variables([x, *cs], [acc, *(named[e] for e in extra_outputs)]).fgraph
    return graph


def _const(value):
    return intern_constant(Constant(ScalarType("float64"), value))


def test_a_sum_of_like_terms_is_one_run():
    graph = _sum_graph(12)
    (run,) = term_runs(graph)
    assert run.terms == 11 and run.end.outputs[0] is graph.outputs[0]
    by_kind = sorted(type(leaves[0]).__name__ for leaves in run.leaves)
    assert len(run.leaves) == 3  # x, the shift, the coefficient
    coefs = next(leaves for leaves in run.leaves if leaves[0] is graph.inputs[2])
    assert list(coefs) == list(graph.inputs[2:13])
    shifts = next(leaves for leaves in run.leaves if isinstance(leaves[0], Constant))
    assert [float(c.data) for c in shifts] == [float(k) for k in range(1, 12)]
    assert by_kind.count("NominalVariable") == 2


def test_too_few_terms_make_no_run():
    assert term_runs(_sum_graph(MIN_TERMS)) == ()  # the first term differs: MIN_TERMS - 1 alike


@pytest.mark.parametrize("read, terms", [("t5", (4, 6)), ("a5", (5, 6))])
def test_values_read_elsewhere_split_the_run(read, terms):
    # term 5's value, or the accumulator after it, is also an output: no loop may hide it
    graph = _sum_graph(12, extra_outputs=(read,))
    assert tuple(run.terms for run in term_runs(graph)) == terms


def test_term_loops_read_elements_that_step_by_one():
    graph = _sum_graph(8)
    lines = []

    class Em:
        def line(self, text):
            lines.append(text)

    in_order = {i: ("sv0", "so0", i - 1) for i in range(1, 9)}
    shuffled = dict(in_order)
    shuffled[4], shuffled[5] = in_order[5], in_order[4]
    assert len(TermLoops(Em(), in_order, None).plan(graph)) == 1
    assert TermLoops(Em(), shuffled, None).plan(graph) == {}
    assert TermLoops(Em(), in_order, None).inputs_only_looped(graph) == set(range(2, 9))


# -- generated code ------------------------------------------------------------------------------
def _terms_program(n, dtype="float64", order=None, shared=False, maximum=False,
                   suffix=False, two_runs=False):
    x = vg.tensor("x", shape=(None,), dtype=dtype)
    a = vg.tensor("a", shape=(n,), dtype=dtype)
    order = order or list(range(n))
    base = vg.exp(x * 0.5) if shared or suffix else None  # one value every term reads
    acc = other = None
    for k in order:
        inner = vg.sin(x + k) * base if shared else vg.sin(x + k)
        term = a[k] * inner if dtype.startswith("float") else a[k] * (x + k)
        acc = term if acc is None else (vg.maximum(acc, term) if maximum else acc + term)
        if two_runs:
            term = a[k] * vg.cos(x - k)
            other = term if other is None else other + term
    if suffix:  # the run's result and a value computed before it, read after it
        acc = vg.tanh(acc) * base + x
    if two_runs:
        acc = acc * other
    return [x, a], acc


@pytest.mark.parametrize("case", ["in_order", "shuffled", "shared", "maximum", "int32",
                                  "float32", "suffix", "two_runs"])
def test_loops_of_like_terms_match_numpy(case):
    # the elements run in blocks of ElementBlock.SIZE (256): none, part of one, several
    n = 40
    kwargs = {"shuffled": dict(order=list(np.random.default_rng(1).permutation(n))),
              "shared": dict(shared=True), "maximum": dict(maximum=True),
              "int32": dict(dtype="int32"), "float32": dict(dtype="float32"),
              "suffix": dict(suffix=True), "two_runs": dict(two_runs=True)}.get(case, {})
    inputs, out = _terms_program(n, **kwargs)
    g = np.random.default_rng(2)
    dtype = kwargs.get("dtype", "float64")
    for size in (9, 0, 256, 700):
        if dtype == "int32":  # (large enough to wrap around, as numpy's int32 does)
            arrays = [g.integers(-2**30, 2**30, size).astype(dtype),
                      g.integers(-2**20, 2**20, n).astype(dtype)]
        else:
            arrays = [g.standard_normal(size).astype(dtype), g.standard_normal(n).astype(dtype)]
        compare_backend(inputs, out, arrays, rtol=1e-4 if dtype == "float32" else None)
    arrays[0] = arrays[0][::-3]  # a strided view
    compare_backend(inputs, out, arrays, rtol=1e-4 if dtype == "float32" else None)
    text = compile_pair(inputs, out)[0]._runner.text
    looped = re.search(r"for c\d+ in range\(\d+\):  # \d+ like terms", text) is not None
    assert looped == (case != "shuffled"), text  # shuffled elements do not step by one
    # the terms loop outside loops over a block's elements (which vectorize)
    blocked = re.search(r"for c\d+ in range\(\d+\):  # \d+ like terms\n(.*\n){0,3}? *for j\d+ "
                        r"in range\(bn\d+\):", text) is not None
    assert blocked == looped, text


# -- helpers the CUDA backend uses where numba-cuda's scalar code is not numpy's ----------------
def _helpers_as_python(*names):
    """The HELPERS defining `names`, run as Python with math's functions answering as the
    device's do (inf and NaN, never an exception)."""
    import cmath
    import math
    import types

    from verglas.scalar_code import HELPERS, helpers_in

    ieee = {k: getattr(math, k) for k in dir(math) if not k.startswith("_")}
    for name in ("log", "log1p", "exp", "pow", "cos", "sin", "floor", "fmod", "copysign"):
        ieee[name] = lambda *a, _f=getattr(np, {"pow": "power"}.get(name, name)): float(_f(*a))
    namespace = {"math": types.SimpleNamespace(**ieee), "np": np, "cmath": cmath}
    for helper in helpers_in(" ".join(f"{n}(x)" for n in names)):
        exec(HELPERS[helper], namespace)
    return namespace


def _same(got, want, rtol):
    for g, w in ((got.real, want.real), (got.imag, want.imag)):
        if (np.isnan(g) and np.isnan(w)) or (g == w and np.signbit(g) == np.signbit(w)):
            continue
        if np.isfinite(w) and abs(g - w) <= rtol * max(1.0, abs(w)):
            continue
        return False
    return True


_SPECIAL = [0.0, -0.0, 0.5, -1.0, 2.0, -3.5, 7.25, 1e-300, 1e17, -1e308, np.inf, -np.inf, np.nan]


def test_float_divmod_is_numpys_on_special_values():
    """numba-cuda's float % and // gave NaN for x % inf (numpy: x or inf), seen on an H100."""
    f = _helpers_as_python("float_divmod")["float_divmod"]
    with np.errstate(all="ignore"):
        for a in _SPECIAL:
            for b in _SPECIAL:
                if b == 0:
                    continue  # Python raises; kernels follow numpy's error model
                got = f(a, b)
                want = (np.floor_divide(a, b), np.remainder(a, b))
                for g, w in zip(got, want):
                    assert _same(complex(g), complex(w), 0), (a, b, got, want)


def test_complex_log1p_survives_a_hypot_that_overflows_at_the_largest_double():
    """libdevice's hypot(DBL_MAX, 1.9) is inf on an H100 (its result rounds up one ulp), so
    log1p(DBL_MAX - 1.9j) came out inf instead of numpy's 709.78 (fuzzer seed 1852)."""
    ns = _helpers_as_python("complex_log1p")
    exact = ns["math"].hypot
    ns["math"].hypot = lambda a, b: float(np.nextafter(exact(a, b), np.inf))  # one ulp high
    for z in [complex(1.7976931348623157e308, -1.8877854840577961),
              complex(-1.7976931348623157e308, 1e308), complex(1e308, 1.7e308)]:
        assert _same(ns["complex_log1p"](z), np.log1p(np.complex128(z)), 1e-12), z


def test_complex_log_log1p_and_power_are_numpys():
    """numba-cuda's complex power lost the real part of (-1.3j) ** (-1.3j), and its cmath.log
    overflowed for |z| > 1e154 (seen on an H100)."""
    ns = _helpers_as_python("complex_log", "complex_log1p", "complex_pow")
    parts = [0.0, -0.0, 0.5, -1.0, 0.9999, 2.0, 1e-200, 1e200, 1e308, np.inf, -np.inf, np.nan]
    with np.errstate(all="ignore"):
        for real in parts:
            for imag in parts:
                z = complex(real, imag)
                assert _same(ns["complex_log"](z), np.log(np.complex128(z)), 1e-9), z
                assert _same(ns["complex_log1p"](z), np.log1p(np.complex128(z)), 1e-9), z
        bases = [0j, 1 + 0j, -3 + 0j, 0.5 + 0j, 1j, -1.3253j, 1 + 1j, 2.5 - 0.5j, 100 + 0j,
                 complex(np.nan, 0), complex(np.inf, 0)]
        for a in bases:
            for b in bases + [-2 + 0j, 3 + 0j, 7 + 0j, -7 + 0j, 99 + 0j]:
                want = np.power(np.complex128(a), np.complex128(b))
                assert _same(ns["complex_pow"](a, b), want, 1e-12), (a, b)
