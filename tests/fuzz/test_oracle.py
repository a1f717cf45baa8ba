"""The oracle's judgement of what numpy leaves open (tests/fuzz/oracle.py, check.compare).

Each case is a finding of the fuzzer where verglas was right and the oracle called a value
determined that numpy does not determine.
"""

from __future__ import annotations

import numpy as np

from tests.fuzz.check import CHOICE_RUNS, CONFIGS, PERTURBED_RUNS, check, compare, expect
from tests.fuzz.generate import generate
from tests.fuzz.oracle import NumpyXP, _order_dependent_product


def _choices(fn, runs=4):
    return [fn(NumpyXP(np.random.default_rng([7, r]), r, moves=False)) for r in range(runs)]


def test_values_derived_from_an_unspecified_cast_are_not_judged():
    """-17.4 cast to uint8 is undefined in C; a float computed from it (a shift, then a
    logsumexp) may be anything, however far from numpy's (fuzzer seed 1258: 24.0 against
    numpy's 1.386)."""
    a = np.array([-17.4, 119.2, -33.9, 48.2])

    def program(xp):
        u = xp.cast(a, "uint8")
        shifted = xp.binary(u, xp.cumsum(u.astype(np.uint64)), "left_shift")
        return xp.nn(shifted, "logsumexp", axis=None)

    want = program(NumpyXP())
    assert compare(np.float64(24.0), want, [], _choices(program)) is None
    # a value no unspecified cast reaches is still judged
    assert compare(np.float64(2.0), np.float64(1.0), [], [np.float64(1.0)]) is not None


def test_a_length_decided_by_an_unspecified_cast_is_not_judged():
    """A loop that stops when its state, exp(x) cast to int64, stops changing: exp(160) is
    beyond int64, numpy gives INT64_MIN there, verglas saturates, and the loop runs another
    number of steps (fuzzer seed 10300: shape (3,) against numpy's (2,)). A run of another
    shape makes the shape undetermined; where every run agrees, the shape is judged."""
    want = np.zeros(2, np.int64)
    assert compare(np.zeros(3, np.int64), want, [], [want, np.zeros(3, np.int64)]) is None
    assert compare(np.zeros(3, np.int64), want, [want], [want]) is not None
    outcome = check(generate(10300), CONFIGS["fast_run"])
    assert outcome.ok, outcome.detail


def test_floats_stored_into_integers_out_of_range_are_unspecified():
    """set_subtensor of 179.6 into int8 is an undefined cast, as in cast (seeds 513, 1290)."""
    x = np.arange(4, dtype=np.int8)
    runs = _choices(lambda xp: xp.update(x, np.array([179.6, 2.0]), template=(slice(0, 2),),
                                         inc=False))
    want = NumpyXP().update(x, np.array([179.6, 2.0]), template=(slice(0, 2),), inc=False)
    got = want.copy()
    got[0] = 3
    assert compare(got, want, [], runs) is None
    got[1] = 5  # 2.0 is exact: judged
    assert compare(got, want, [], runs) is not None


def test_the_sign_of_a_zero_dot_is_not_judged():
    """numpy's dot gives -0.0 for [-6.0] . [0.0] and its matmul 0.0 (seed 3028)."""
    a, b = np.array([-6.0]), np.array([0.0])
    assert np.signbit(np.dot(a, b)) != np.signbit(np.matmul(a, b))
    runs = _choices(lambda xp: xp.dot(a, b), runs=8)
    assert compare(np.float64(0.0), np.dot(a, b), [], runs) is None


def test_products_whose_order_decides_overflow_are_not_judged():
    """(1e30 * 1e30) * 1e-30 overflows, 1e30 * (1e30 * 1e-30) does not; a complex product
    that overflows is any mix of inf and NaN (CUDA seed 672)."""
    a = np.array([[1e30, 1e30, 1e-30], [2.0, 3.0, 0.5]], np.float32)
    assert _order_dependent_product(a, 1, False).tolist() == [True, False]
    c = np.array([[1e30 + 1e30j, 1e30 - 1e30j, 1e-30j]], np.complex64)
    assert _order_dependent_product(c, 1, False).tolist() == [True]


def test_expect_gives_choice_runs():
    from tests.fuzz.generate import generate

    e = expect(generate(3))
    assert e.error is not None or (len(e.choices) == CHOICE_RUNS
                                   and len(e.runs) == PERTURBED_RUNS)


def test_complex_powers_that_overflow_on_the_way_are_not_judged():
    """numpy's z**-5 of a huge complex64 z multiplies z five times (inf) and divides: NaN;
    exp(-5 * log(z)) gives 0 (fuzzer seed 3824)."""
    z = np.array([3e8 + 1e8j, 0.5 + 0.5j], np.complex64)
    want = NumpyXP().binary(z, -5, "power")
    runs = _choices(lambda xp: xp.binary(z, -5, "power"))
    got = want.copy()
    got[0] = 0
    assert compare(got, want, [], runs) is None
    got[1] = 0  # (0.5 + 0.5j)**-5 is finite and in range: judged
    assert compare(got, want, [], runs) is not None


def test_unspecified_unsigned_values_take_one_from_the_middle_too():
    """Seed 18478: 1e30 cast to uint16, plus 7, then argmax against 11: the fills 0, 1 and
    65535 (wrapping to 6) all left the argmax where numpy's was, while verglas's saturated
    cast (64512) moved it; a run filling another value shows the argmax is undetermined."""
    a = np.array([1e30, 0.0, 4.0])
    fills = [xp.cast(a, "uint16")[0] for xp in
             (NumpyXP(np.random.default_rng([7, r]), r, moves=False) for r in range(4))]
    assert len(set(fills)) == 4 and any(11 < v < 65535 - 7 for v in fills)
    outcome = check(generate(18478), CONFIGS["fast_run"])
    assert outcome.ok, outcome.detail


def test_an_error_that_an_unspecified_value_decides_is_not_judged():
    """Seed 20846: a loop over int64 states stops at a fixed point of where(h, -5, h / h)
    cast to int64. At h = 0 the cast of NaN is unspecified; verglas's 0 is a fixed point, so
    its loop stops a step before numpy's (whose INT64_MIN is not), and broadcasting the shorter
    trace raises. A choice run that fills 0 raises the same error: the error is numpy's too."""
    expected = expect(generate(20846))
    assert expected.error is None and ValueError in expected.run_errors
    outcome = check(generate(20846), CONFIGS["fast_run"])
    assert outcome.ok, outcome.detail


def test_a_row_of_unspecified_values_is_not_judged_as_if_they_were_equal():
    """Seed 25538: a log_softmax over rows of int64 casts of NaN, -inf and 1e30. numpy gives
    INT64_MIN for all three (-log 3 each); verglas's saturated casts (0, INT64_MIN, INT64_MAX)
    differ, and so do its results. Fills of one value everywhere kept such a row's elements
    equal in every choice run; fills in turn by place show the result is undetermined."""
    a = np.array([[np.nan, -np.inf, 1e30], [1.0, 2.0, 3.0]])

    def program(xp):
        return xp.nn(xp.cast(a, "int64"), "log_softmax", axis=1)

    want = program(NumpyXP())
    got = want.copy()
    got[0] = [-0.693, -9.2e18, -0.693]
    assert compare(got, want, [], _choices(program, runs=CHOICE_RUNS)) is None
    got[1] = 0.0  # a row of values numpy determines is judged
    assert compare(got, want, [], _choices(program, runs=CHOICE_RUNS)) is not None
    outcome = check(generate(25538), CONFIGS["fast_run"])
    assert outcome.ok, outcome.detail


def test_an_integral_product_with_a_zero_and_an_overflow_is_not_judged():
    """Seed 27055: a float16 product of integers with a zero among factors whose product
    overflows: in numpy's order the zero comes first (0), in a tree order on CUDA inf meets it
    (NaN). Integral factors made the product exact in any order, which holds only without
    such a zero."""
    a = np.array([[1.0, -6.0, 1.0, -6.0, -5.0], [0.0, -6.0, 0.0, 3.0, 7.0],
                  [6.0, 8.0, 8.0, -1.0, -6.0], [-7.0, 4.0, -2.0, -7.0, -4.0]], np.float16)

    def program(xp):
        return xp.reduce(a, "prod", axis=None, keepdims=True)

    want = program(NumpyXP())
    assert compare(np.full((1, 1), np.nan, np.float16), want, [],
                   _choices(program, runs=CHOICE_RUNS)) is None
    b = a[:1]  # no zero, in range: exact in any order, judged
    want = NumpyXP().reduce(b, "prod", axis=None, keepdims=True)
    runs = _choices(lambda xp: xp.reduce(b, "prod", axis=None, keepdims=True), runs=CHOICE_RUNS)
    assert compare(np.full((1, 1), np.nan, np.float16), want, [], runs) is not None


def test_a_static_index_error_of_an_update_is_accepted_where_numpy_checks_the_value_first():
    """Seed 28282: set_subtensor(x0[i, ::-2, j], v) with i out of bounds of x0's static
    length and v of the wrong shape. numpy's setitem raises ValueError for v; verglas builds
    x0[i, ::-2, j] on its own first, and its static bounds check raises IndexError."""
    outcome = check(generate(28282), CONFIGS["fast_run"])
    assert outcome.ok, outcome.detail


def test_a_static_index_error_of_an_update_is_accepted_where_the_dtype_rule_comes_first():
    """Seed 31359: inc_subtensor(b[::3, bool mask, [0, 3], [7]], v) with b bool and v float32.
    The oracle raises TypeError (float32 cannot be added into bool); verglas builds the index
    first, and its index arrays cannot broadcast: IndexError, as numpy's own b[...] raises."""
    outcome = check(generate(31359), CONFIGS["fast_run"])
    assert outcome.ok, outcome.detail


def test_a_result_any_ulp_decides_is_not_judged():
    """Seed 29406: a loop iterating tan 635 times over float32 states, then an argmin of the
    last state: any ulp decides the result (perturbed runs give every answer), but with four
    runs all agreed with numpy by chance and verglas's other answer was judged wrong."""
    expected = expect(generate(29406))
    answers = {tuple(np.ravel(r[0])) for r in expected.runs if r is not None}
    assert len(answers) > 1
    outcome = check(generate(29406), CONFIGS["fast_run"])
    assert outcome.ok, outcome.detail


def test_a_product_that_overflows_into_a_sum_is_not_judged():
    """Seed 35240: sum(x * -129) over a row holding 3e36 and -3e36 in float32. numpy rounds
    each product to -inf and +inf and sums to NaN; a product contracted into an FMA is not
    rounded, and verglas's sum was -inf. The same product alone stays judged."""
    def program(xp):
        a = np.array([[3e36, -3e36, 1.0], [2.0, 3.0, 0.5]], np.float32)
        p = xp.binary(a, np.float32(-129), "mul")
        return [xp.reduce(p, "sum", 1), xp.binary(p, np.float32(1), "add"), p]

    runs = [program(NumpyXP(np.random.default_rng([5, r]), r, rewrites=True))
            for r in range(PERTURBED_RUNS)]
    want = program(NumpyXP(rewrites=True))
    assert np.isnan(want[0][0]) and np.isinf(want[2][0, 0])
    got = [np.array([-np.inf, want[0][1]], np.float32), want[1], want[2]]
    assert compare(got[0], want[0], [r[0] for r in runs]) is None
    got[1] = want[1].copy()
    got[1][0, 0] = np.nan  # (fma(3e36, -129, inf) would be inf; numpy's -inf + inf is NaN)
    assert compare(got[1], want[1], [r[1] for r in runs]) is None
    wrong = want[2].copy()
    wrong[0, 0] = -np.finfo(np.float32).max
    assert compare(wrong, want[2], [r[2] for r in runs]) is not None  # (a product alone)
    wrong_sum = np.array([-np.inf, 5.0], np.float32)
    assert compare(wrong_sum, want[0], [r[0] for r in runs]) is not None  # (the other row)
    outcome = check(generate(35240), CONFIGS["fast_run"])
    assert outcome.ok, outcome.detail
