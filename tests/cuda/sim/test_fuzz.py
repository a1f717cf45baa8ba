"""The random-program fuzzer on the CUDA backend (simulator), and its findings as regression
tests (each a minimized program that failed)."""

from __future__ import annotations

import os

import numpy as np
import pytest

import verglas as vg
from tests.fuzz.check import CONFIGS, check
from tests.fuzz.generate import generate
from tests.fuzz.minimize import minimize
from tests.fuzz.test_regressions import same

PROGRAMS = int(os.environ.get("VERGLAS_FUZZ_PROGRAMS_SIM", "300"))


def test_random_programs_match_numpy():
    np.seterr(all="ignore")
    config = CONFIGS["cuda_sim"]
    failures = []
    for seed in range(PROGRAMS):
        outcome = check(generate(seed, small=True), config)
        if not outcome.ok:
            failures.append((seed, outcome))
    if failures:
        seed, outcome = failures[0]
        small = minimize(generate(seed, small=True), config, outcome.signature, budget=60)
        pytest.fail(f"{len(failures)} of {PROGRAMS} programs failed: "
                    f"{[(s, o.signature) for s, o in failures[:20]]}\nseed {seed}: "
                    f"{outcome.detail[:2000]}\nminimized:\n{small}")


def run(inputs, outputs, values):
    return [vg.asnumpy(o) for o in vg.compile(inputs, outputs, device="cuda")(*values)]


def t(name, shape, dtype):
    return vg.tensor(name, shape=shape, dtype=dtype)


def test_float_functions_convert_integer_and_bool_arguments_first():
    """sigmoid(bool) negated a numpy bool; sigmoid(uint16 65535) wrapped -x around."""
    b, u = t("b", (None,), "bool"), t("u", (None,), "uint16")
    bs, us = np.array([True, False]), np.array([65535, 3], np.uint16)
    got = run([b, u], [vg.sigmoid(b), -vg.sigmoid(u)], [bs, us])
    same(got[0], (1 / (1 + np.exp(-bs.astype(np.float16)))).astype(np.float16), rtol=1e-3)
    same(got[1], -(1 / (1 + np.exp(-us.astype(np.float32)))), rtol=1e-6)


def test_simulated_math_overflows_to_inf():
    """Python's math and cmath raise on overflow where a GPU returns inf (cos of a complex
    with a large imaginary part; exp(13) in float16 computed in double, as on the device)."""
    z, h = t("z", (), "complex64"), t("h", (None,), "float16")
    zs = np.array(0.0467 - 1540.97j, np.complex64)
    hs = np.array([11.0, 4.0, 13.0], np.float16)
    got = run([z, h], [vg.cos(z), vg.softplus(h)], [zs, hs])
    with np.errstate(all="ignore"):
        same(got[0], np.cos(zs))
        same(got[1], np.logaddexp(0, hs.astype(np.float64)).astype(np.float16), rtol=1e-3)


def test_complex_literals_and_reductions():
    x, z = t("x", (None,), "float64"), t("z", (None, None), "complex128")
    xs, zs = np.array([0.0, 2.0]), np.array([[2 + 0j, 1 - 3j]])
    got = run([x, z], [vg.clip(x, 1j, float("nan")), vg.min(z), vg.max(z, axis=1)], [xs, zs])
    same(got[0], np.clip(xs, 1j, np.nan))
    same(got[1], np.min(zs))
    same(got[2], np.max(zs, axis=1))


def test_cumsum_and_casts_as_numpy():
    x, i = t("x", (None, None), "float64"), t("i", (None,), "int64")
    xs, big = np.array([[-0.0]]), np.array([-7067356314067703396], np.int64)
    got = run([x, i], [vg.cumsum(x, axis=0), i.astype("float64").astype("int64")], [xs, big])
    same(got[0], np.cumsum(xs, axis=0))
    same(got[1], big.astype(np.float64).astype(np.int64))


def test_empty_update_still_checks_its_indices():
    x = t("x", (None, None, None), "float32")
    v = vg.transpose(x, axes=(1, 2, 0))
    f = vg.compile([x], vg.set_subtensor(v[:0:1, np.array([2, 2, 0, 2], "int32"), 0], 0.0),
                   device="cuda")
    with pytest.raises(IndexError):
        f(np.array([[[-1.0]]], np.float32))


def test_index_arrays_of_an_empty_block_are_not_bounds_checked():
    """seed 4632: numpy checks no index array of an empty broadcast block (integers it does)."""
    x = t("x", (None, None, None), "complex64")
    v = vg.set_subtensor(x[np.array([0], "int64"), -1, np.zeros((0,), "int64")], 1)
    value = np.zeros((0, 1, 1), np.complex64)
    same(run([x], [v.T], [value])[0], value.T)
    f = vg.compile([x], [vg.set_subtensor(x[np.array([0], "int64"), 5, np.zeros(0, "int64")],
                                          1)], device="cuda")
    with pytest.raises(IndexError):
        f(value)


def test_inplace_host_step_on_a_constant():
    """An inplace step run on the host wrote into a read-only constant."""
    x0, x1 = t("x0", (None,), "uint64"), t("x1", (None,), "bool")
    v2 = vg.scan(lambda s0: vg.sqr(vg.imag(vg.cast(s0, "uint64"))), sequences=[x0])
    out = vg.matmul(vg.softmax(vg.imag(vg.reciprocal(v2)), axis=0), x1)
    a, b = np.array([5, 5, 5], np.uint64), np.array([True, True, True])
    ref = vg.compile([x0, x1], out, mode="reference")(a, b)
    same(run([x0, x1], [out], [a, b])[0], ref)


def test_float_remainder_and_floor_division_by_infinities():
    """numba-cuda's float % and // gave NaN for x % -inf and x // inf (numpy: x or -inf, 0 or
    -1): fuzzer seeds 198, 953, 1809, 1946 on an H100. The kernels now use numpy's divmod."""
    x, y = t("x", (None,), "float32"), t("y", (None,), "float64")
    xs = np.array([-0.6443, 0.4144, 0.0, -0.0, np.inf, np.nan, 3.0], np.float32)
    ys = np.array([-np.inf, np.inf, -np.inf, np.inf, 2.0, 1.0, 0.0])
    got = run([x, y], [x % y, x // y, vg.mod(x, -np.inf)], [xs, ys])
    with np.errstate(all="ignore"):
        same(got[0], np.remainder(xs, ys))
        same(got[1], np.floor_divide(xs, ys))
        same(got[2], np.remainder(xs, np.float32(-np.inf)))


def test_complex_power_log_and_log1p():
    """numba-cuda's complex power lost the real part of (-1.3j) ** (-1.3j) (seeds 142, 637) and
    its log1p overflowed for large parts (seed 1852), on an H100."""
    z, w = t("z", (None,), "complex64"), t("w", (None,), "complex128")
    zs = np.array([-1.3253j, 2 + 1j, 0j, -3 + 0j], np.complex64)
    ws = np.array([1e300 + 1e300j, -0.5 + 2j, 1e-20j, -1 + 0j])
    got = run([z, w], [z ** z, vg.log1p(w), vg.log(w), w ** 3], [zs, ws])
    with np.errstate(all="ignore"):
        same(got[0], zs ** zs, rtol=1e-5)
        same(got[1], np.log1p(ws))
        same(got[2], np.log(ws))
        same(got[3], ws ** 3)


def test_a_reduction_without_identity_over_an_empty_axis_raises_with_an_empty_result():
    """max (and argmax) over an axis of length 0 raise in numpy whatever the result's size: the
    kernels raised only when the result had elements (seed 27149: (0, 1, 0) max over (1, 0),
    result (1, 1, 0)); the row kernel too, with no rows."""
    x = t("x", (None, None, None), "float16")
    f = vg.compile([x], [vg.abs(x / 0.5).max(axis=(1, 0), keepdims=True),
                         vg.max(x, axis=2)], device="cuda")
    for shape in ((0, 1, 0), (2, 0, 0), (0, 0, 3)):
        with pytest.raises(ValueError, match="no identity"):
            f(np.zeros(shape, dtype="float16"))
    got = f(np.ones((2, 1, 3), dtype="float16"))
    same(vg.asnumpy(got[0]), np.full((1, 1, 3), 2.0, dtype="float16"))
    rows = vg.compile([x], [vg.exp(x - vg.max(x, axis=2, keepdims=True))], device="cuda")
    assert any("row" in line for line in str(rows.program).split("\n"))  # (a row kernel)
    with pytest.raises(ValueError, match="no identity"):
        rows(np.zeros((0, 2, 0), dtype="float16"))
    same(vg.asnumpy(rows(np.zeros((0, 2, 3), dtype="float16"))[0]), np.zeros((0, 2, 3), "float16"))
