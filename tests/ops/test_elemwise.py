"""Elementwise functions, operators and DimShuffle against numpy (reference executor).

numpy 2 is the spec: same values, same dtypes (NEP 50: Python scalars are weak), broadcasting
decided at run time for dimensions that are None (a None that is 1 at run time broadcasts).
"""

import math
import operator
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import verglas as vg
from tests.helpers import (DTYPES, SETTINGS, broadcastable_shapes, compare_to_numpy,
                           compile_and_run, dtypes, layouts, random_array, seeds, shapes,
                           symbolic_shape, with_layout)

FEW = settings(SETTINGS, max_examples=15)


def _float_result(x):
    """numpy's float dtype for a unary float function of `x` (ints -> float64, bool -> f16)."""
    return np.exp(np.zeros(1, x.dtype)).dtype


def np_sigmoid(x):
    return (1 / (1 + np.exp(-x.astype("float64")))).astype(_float_result(x))


def np_softplus(x):
    return np.logaddexp(0.0, x.astype("float64")).astype(_float_result(x))


def np_erf(x):
    return np.vectorize(math.erf, otypes=["float64"])(x.astype("float64")).astype(
        _float_result(x))


def np_reciprocal(x):
    # Decision: vg.reciprocal(x) is 1 / x (true division): integers give float64, where
    # np.reciprocal truncates (np.reciprocal(2) == 0). Floats are numpy's reciprocal.
    return np.divide(1, x)


UNARY = {
    "neg": (vg.neg, np.negative), "abs": (vg.abs, np.abs), "sign": (vg.sign, np.sign),
    "exp": (vg.exp, np.exp), "log": (vg.log, np.log), "log1p": (vg.log1p, np.log1p),
    "expm1": (vg.expm1, np.expm1), "sqrt": (vg.sqrt, np.sqrt), "sqr": (vg.sqr, np.square),
    "sin": (vg.sin, np.sin), "cos": (vg.cos, np.cos), "tan": (vg.tan, np.tan),
    "tanh": (vg.tanh, np.tanh), "sigmoid": (vg.sigmoid, np_sigmoid),
    "softplus": (vg.softplus, np_softplus), "erf": (vg.erf, np_erf),
    "floor": (vg.floor, np.floor), "ceil": (vg.ceil, np.ceil),
    "reciprocal": (vg.reciprocal, np_reciprocal), "isnan": (vg.isnan, np.isnan),
    "isinf": (vg.isinf, np.isinf), "invert": (vg.invert, np.invert),
    "logical_not": (vg.logical_not, np.logical_not),
}

BINARY = {
    "add": (vg.add, np.add), "sub": (vg.sub, np.subtract), "mul": (vg.mul, np.multiply),
    "true_divide": (vg.true_divide, np.true_divide), "divide": (vg.divide, np.divide),
    "floor_divide": (vg.floor_divide, np.floor_divide), "mod": (vg.mod, np.remainder),
    "power": (vg.power, np.power), "maximum": (vg.maximum, np.maximum),
    "minimum": (vg.minimum, np.minimum), "eq": (vg.eq, np.equal), "neq": (vg.neq, np.not_equal),
    "lt": (vg.lt, np.less), "le": (vg.le, np.less_equal), "gt": (vg.gt, np.greater),
    "ge": (vg.ge, np.greater_equal), "bitwise_and": (vg.bitwise_and, np.bitwise_and),
    "bitwise_or": (vg.bitwise_or, np.bitwise_or), "bitwise_xor": (vg.bitwise_xor, np.bitwise_xor),
    "logical_and": (vg.logical_and, np.logical_and), "logical_or": (vg.logical_or, np.logical_or),
}

OPERATORS = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
    # "**" is np.power: ndarray.__pow__ has a fast path (b ** 2 is np.square(b), int8 for a
    # bool b, where np.power(b, 2) is int64) that verglas does not copy
    "//": operator.floordiv, "%": operator.mod, "**": np.power, "<": operator.lt,
    "<=": operator.le, ">": operator.gt, ">=": operator.ge, "&": operator.and_,
    "|": operator.or_, "^": operator.xor,
}
UNARY_OPERATORS = {"-": operator.neg, "abs": abs, "~": operator.invert, "+": operator.pos}


def numpy_refuses(np_fn, *dtypes_) -> bool:
    """Whether numpy raises TypeError for these input dtypes (no loop for them)."""
    try:
        with np.errstate(all="ignore"):
            np_fn(*[np.ones(1, d) for d in dtypes_])
    except TypeError:
        return True
    return False


def _symbolic(dtype, ndim=1, name="x"):
    return vg.tensor(name, shape=(None,) * ndim, dtype=dtype)


# -- unary functions ----------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(UNARY))
@FEW
@given(dtype=dtypes(), shape=shapes(), special=st.booleans(), layout=layouts(), seed=seeds(),
       data=st.data())
def test_unary_matches_numpy(name, dtype, shape, special, layout, seed, data):
    vg_fn, np_fn = UNARY[name]
    if numpy_refuses(np_fn, dtype):
        with pytest.raises(TypeError):
            vg_fn(_symbolic(dtype, len(shape)))
        return
    rng = np.random.default_rng(seed)
    arr = with_layout(random_array(rng, dtype, shape, special=special), layout)
    compare_to_numpy(vg_fn, np_fn, [arr], [data.draw(symbolic_shape(shape))])


@pytest.mark.parametrize("name", ["exp", "log", "sqrt", "sin", "tanh", "sigmoid", "softplus",
                                  "erf", "log1p", "expm1", "floor", "sign", "abs", "isnan"])
def test_unary_special_values(name):
    vg_fn, np_fn = UNARY[name]
    for dtype in ("float32", "float64"):
        arr = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, -1e30, 88.0, -750.0, 1.0],
                       dtype=dtype)
        compare_to_numpy(vg_fn, np_fn, [arr])


# -- binary functions ---------------------------------------------------------------------------
def _binary_operands(rng, name, dtype_a, dtype_b, shape_a, shape_b, special):
    a = random_array(rng, dtype_a, shape_a, special=special)
    b = random_array(rng, dtype_b, shape_b, special=special)
    if name == "power" and np.dtype(dtype_b).kind in "iu":
        b = random_array(rng, dtype_b, shape_b, low=0, high=4)  # ints: no negative powers
    return a, b


@pytest.mark.parametrize("name", sorted(BINARY))
@FEW
@given(dtype_a=dtypes(), dtype_b=dtypes(), shapes_=broadcastable_shapes(), special=st.booleans(),
       layout_a=layouts(), layout_b=layouts(), seed=seeds(), data=st.data())
def test_binary_matches_numpy(name, dtype_a, dtype_b, shapes_, special, layout_a, layout_b,
                              seed, data):
    vg_fn, np_fn = BINARY[name]
    shape_a, shape_b = shapes_
    if numpy_refuses(np_fn, dtype_a, dtype_b):
        with pytest.raises(TypeError):
            vg_fn(_symbolic(dtype_a, len(shape_a), "a"), _symbolic(dtype_b, len(shape_b), "b"))
        return
    rng = np.random.default_rng(seed)
    a, b = _binary_operands(rng, name, dtype_a, dtype_b, shape_a, shape_b, special)
    a, b = with_layout(a, layout_a), with_layout(b, layout_b)
    static = [data.draw(symbolic_shape(shape_a)), data.draw(symbolic_shape(shape_b))]
    compare_to_numpy(vg_fn, np_fn, [a, b], static)


@pytest.mark.parametrize("symbol", sorted(OPERATORS))
@FEW
@given(dtype_a=dtypes(), dtype_b=dtypes(), shapes_=broadcastable_shapes(), seed=seeds())
def test_binary_operators_match_numpy(symbol, dtype_a, dtype_b, shapes_, seed):
    np_fn = OPERATORS[symbol]
    fn = operator.pow if symbol == "**" else np_fn
    if numpy_refuses(np_fn, dtype_a, dtype_b):
        with pytest.raises(TypeError):
            fn(_symbolic(dtype_a, len(shapes_[0]), "a"), _symbolic(dtype_b, len(shapes_[1]), "b"))
        return
    rng = np.random.default_rng(seed)
    name = "power" if symbol == "**" else symbol
    a, b = _binary_operands(rng, name, dtype_a, dtype_b, *shapes_, special=False)
    compare_to_numpy(fn, np_fn, [a, b])


@pytest.mark.parametrize("symbol", sorted(UNARY_OPERATORS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_unary_operators_match_numpy(symbol, dtype):
    fn = UNARY_OPERATORS[symbol]
    if numpy_refuses(fn, dtype):
        with pytest.raises(TypeError):
            fn(_symbolic(dtype, 2))
        return
    arr = random_array(np.random.default_rng(0), dtype, (3, 4))
    compare_to_numpy(fn, fn, [arr.T])


@pytest.mark.parametrize("symbol", sorted(OPERATORS))
@pytest.mark.parametrize("scalar", [2, 3.5, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_reflected_operators_with_python_scalars(symbol, scalar, dtype):
    np_fn = OPERATORS[symbol]
    fn = operator.pow if symbol == "**" else np_fn
    arr = random_array(np.random.default_rng(1), dtype, (2, 3), low=1, high=5)
    for left in (True, False):
        args = [scalar, arr] if left else [arr, scalar]
        try:
            with np.errstate(all="ignore"):
                np_fn(*args)
        except TypeError:
            with pytest.raises(TypeError):
                fn(*[_symbolic(dtype, 2) if isinstance(a, np.ndarray) else a for a in args])
            continue
        compare_to_numpy(fn, np_fn, args)


# -- NEP 50 dtypes, weak Python scalars --------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "int32", "int64", "uint8",
                                   "bool", "float16"])
@pytest.mark.parametrize("scalar", [2, 2.0, True, -1, 0.5])
@pytest.mark.parametrize("name", ["add", "mul", "sub", "true_divide", "maximum", "lt", "power"])
def test_python_scalars_are_weak(dtype, scalar, name):
    vg_fn, np_fn = BINARY[name]
    arr = random_array(np.random.default_rng(2), dtype, (4,), low=0, high=5)
    try:
        with np.errstate(all="ignore"):
            np_fn(arr, scalar)
    except (TypeError, OverflowError, ValueError) as exc:
        with pytest.raises(type(exc)):
            compile_and_run(lambda x: vg_fn(x, scalar), [arr])
        return
    compare_to_numpy(vg_fn, np_fn, [arr, scalar])
    if name != "power":  # scalar ** int array may meet negative powers
        compare_to_numpy(vg_fn, np_fn, [scalar, arr])


def test_weak_scalar_examples():
    x32 = vg.tensor("x", (None,), "float32")
    i32 = vg.tensor("i", (None,), "int32")
    b = vg.tensor("b", (None,), "bool")
    assert (x32 * 2.0).dtype == "float32"
    assert (x32 + 2).dtype == "float32"
    assert (2.0 / x32).dtype == "float32"
    assert (i32 + 2).dtype == "int32"
    assert (i32 * 2.5).dtype == "float64"
    assert (i32 / 2).dtype == "float64"
    assert (b + 1).dtype == "int64"
    assert (b + True).dtype == "bool"
    assert (b * 1.5).dtype == "float64"
    # numpy scalars and 0-d arrays are strong
    assert (x32 + np.float64(2.0)).dtype == "float64"
    assert (i32 + np.int64(2)).dtype == "int64"
    assert (x32 + vg.constant(2.0)).dtype == "float64"


def test_python_int_out_of_range_overflows_like_numpy():
    i8 = vg.tensor("i", (None,), "int8")
    u8 = vg.tensor("u", (None,), "uint8")
    with pytest.raises(OverflowError):
        np.ones(2, "int8") + 1000
    with pytest.raises(OverflowError, match="1000"):
        i8 + 1000
    with pytest.raises(OverflowError):
        u8 + (-1)
    with pytest.raises(OverflowError):
        vg.maximum(i8, 1000)
    with pytest.raises(OverflowError):
        vg.full_like(i8, 1000)


def test_comparison_with_out_of_range_python_int_is_exact():
    arr8 = np.array([-128, 0, 127], dtype="int8")
    arr32 = np.array([-5, 0, 5], dtype="int32")
    for fn, np_fn in ((vg.eq, np.equal), (operator.lt, operator.lt), (operator.ge, operator.ge),
                      (vg.neq, np.not_equal)):
        compare_to_numpy(lambda x: fn(x, 1000), lambda x: np_fn(x, 1000), [arr8])
        compare_to_numpy(lambda x: fn(x, 2**40), lambda x: np_fn(x, 2**40), [arr32])
        compare_to_numpy(lambda x: fn(x, -2**40), lambda x: np_fn(x, -2**40), [arr32])


# -- integer division, modulo, NaN propagation -------------------------------------------------
@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8", "float32", "float64"])
@pytest.mark.parametrize("name", ["floor_divide", "mod", "true_divide"])
def test_division_signs_and_zero(dtype, name):
    a = np.array([-7, 7, -7, 7, 0, 5, -5, 0, 6, -6], dtype="int64")
    b = np.array([2, -2, -2, 2, 3, 0, 0, 0, 3, 3], dtype="int64")
    if np.dtype(dtype).kind == "u":
        a, b = np.abs(a), np.abs(b)
    a, b = a.astype(dtype), b.astype(dtype)
    vg_fn, np_fn = BINARY[name]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RuntimeWarning, no exception: numpy's values
        got = compare_to_numpy(vg_fn, np_fn, [a, b])
    if np.dtype(dtype).kind in "iu" and name != "true_divide":
        assert got[5] == 0 and got[7] == 0  # integer division by zero gives 0 as numpy
    if name == "mod" and np.dtype(dtype).kind in "if":
        # the result takes the sign of the divisor, as numpy and Python
        assert got[0] == 1 and got[1] == -1 and got[2] == -1


def test_float_mod_and_floor_divide_negative_operands():
    a = np.array([-7.5, 7.5, -7.5, 7.5, -0.0, 1e-300, np.inf, 3.0])
    b = np.array([2.0, -2.0, -2.0, 2.0, 3.0, -1.0, 2.0, np.inf])
    compare_to_numpy(vg.mod, np.remainder, [a, b])
    compare_to_numpy(vg.floor_divide, np.floor_divide, [a, b])
    compare_to_numpy(lambda x, y: x % y, lambda x, y: x % y, [a, b])


def test_integer_negative_power_raises_like_numpy():
    a, b = np.array([2, 3]), np.array([1, -1])
    with pytest.raises(ValueError):
        np.power(a, b)
    with pytest.raises(ValueError):
        compile_and_run(vg.power, [a, b])


@pytest.mark.parametrize("name", ["maximum", "minimum"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_maximum_minimum_propagate_nan(name, dtype):
    a = np.array([np.nan, 1.0, np.nan, -np.inf, 2.0, 0.0], dtype=dtype)
    b = np.array([1.0, np.nan, np.nan, np.nan, -np.inf, -0.0], dtype=dtype)
    vg_fn, np_fn = BINARY[name]
    got = compare_to_numpy(vg_fn, np_fn, [a, b])
    assert np.isnan(got[:4]).all()
    compare_to_numpy(vg.clip, lambda x, lo, hi: np.clip(x, lo, hi), [a, b, np.float64(1.5)])


# -- where, clip, casts, *_like -----------------------------------------------------------------
@FEW
@given(shapes_=broadcastable_shapes(3), dtype_a=dtypes(), dtype_b=dtypes(),
       cond_dtype=dtypes(), seed=seeds())
def test_where_matches_numpy(shapes_, dtype_a, dtype_b, cond_dtype, seed):
    rng = np.random.default_rng(seed)
    c = random_array(rng, cond_dtype, shapes_[0], low=-1, high=2, special=True)
    a = random_array(rng, dtype_a, shapes_[1], special=True)
    b = random_array(rng, dtype_b, shapes_[2])
    compare_to_numpy(vg.where, np.where, [c, a, b])


@pytest.mark.parametrize("dtype", DTYPES)
def test_where_with_python_scalars(dtype):
    c = np.array([True, False, True])
    a = random_array(np.random.default_rng(3), dtype, (3,))
    compare_to_numpy(vg.where, np.where, [c, a, 0])
    compare_to_numpy(vg.where, np.where, [c, 1.5, a])
    compare_to_numpy(vg.where, np.where, [c, 1, 0.0])
    compare_to_numpy(lambda x: vg.where(True, x, 2), lambda x: np.where(True, x, 2), [a])
    compare_to_numpy(lambda x: vg.where(x, 1.0, -1.0), lambda x: np.where(x, 1.0, -1.0), [a])
    assert vg.where(False, vg.tensor("t", (2,), dtype), 0).owner.inputs[0].dtype == "bool"


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_clip_matches_numpy(dtype):
    rng = np.random.default_rng(4)
    x = random_array(rng, dtype, (3, 4))
    lo, hi = random_array(rng, dtype, (4,), -2, 0), random_array(rng, dtype, (3, 1), 0, 3)
    compare_to_numpy(vg.clip, np.clip, [x, lo, hi])
    compare_to_numpy(lambda t: vg.clip(t, -1, 2), lambda t: np.clip(t, -1, 2), [x])
    compare_to_numpy(lambda t: vg.clip(t, None, 2), lambda t: np.clip(t, None, 2), [x])
    compare_to_numpy(lambda t: vg.clip(t, 0, None), lambda t: np.clip(t, 0, None), [x])


@pytest.mark.parametrize("src", DTYPES + ("int8", "uint8", "float16"))
@pytest.mark.parametrize("dst", DTYPES + ("int8", "uint8", "float16"))
def test_cast_and_astype_match_numpy(src, dst):
    rng = np.random.default_rng(5)
    arr = random_array(rng, src, (2, 3), low=0, high=100)
    if np.dtype(src).kind == "f" and np.dtype(dst).kind == "f":
        arr = random_array(rng, src, (2, 3), special=True)
    compare_to_numpy(lambda x: vg.cast(x, dst), lambda x: x.astype(dst), [arr[:, ::-1]])
    compare_to_numpy(lambda x: x.astype(dst), lambda x: x.astype(dst), [arr])
    x = vg.tensor("x", (2, None), src)
    assert x.astype(src) is x  # no-op cast
    assert vg.cast(x, np.dtype(dst)).dtype == np.dtype(dst).name


def test_cast_refuses_unsupported_dtypes():
    x = vg.tensor("x", (None,), "float64")
    with pytest.raises(TypeError):
        vg.cast(x, "U3")
    with pytest.raises(TypeError):
        x.astype(object)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("out_dtype", [None, "float32", "int64", "bool"])
def test_like_constructors_match_numpy(dtype, out_dtype):
    arr = with_layout(random_array(np.random.default_rng(6), dtype, (2, 3)), "F")
    for vg_fn, np_fn in ((vg.zeros_like, np.zeros_like), (vg.ones_like, np.ones_like)):
        compare_to_numpy(lambda x: vg_fn(x, dtype=out_dtype),
                         lambda x: np_fn(x, dtype=out_dtype), [arr])
    compare_to_numpy(lambda x: vg.full_like(x, 7, dtype=out_dtype),
                     lambda x: np.full_like(x, 7, dtype=out_dtype), [arr])
    compare_to_numpy(lambda x: vg.full_like(x, 2.5), lambda x: np.full_like(x, 2.5), [arr])


def test_full_like_with_symbolic_value():
    arr, val = np.zeros((2, 3), "float32"), np.array(2.5)
    compare_to_numpy(lambda x, v: vg.full_like(x, v), lambda x, v: np.full_like(x, v), [arr, val])


def test_like_constructors_of_empty_and_scalar():
    for arr in (np.zeros((0, 3)), np.array(3.0), np.zeros((1, 1), "int32")):
        compare_to_numpy(vg.ones_like, np.ones_like, [arr])
        compare_to_numpy(vg.zeros_like, np.zeros_like, [arr], [arr.shape])


@pytest.mark.parametrize("dtype", DTYPES)
def test_isnan_isinf_logical_on_every_dtype(dtype):
    arr = random_array(np.random.default_rng(7), dtype, (5,), special=True)
    other = random_array(np.random.default_rng(8), "float64", (5,), special=True)
    for vg_fn, np_fn in ((vg.isnan, np.isnan), (vg.isinf, np.isinf),
                         (vg.logical_not, np.logical_not)):
        compare_to_numpy(vg_fn, np_fn, [arr])
    for vg_fn, np_fn in ((vg.logical_and, np.logical_and), (vg.logical_or, np.logical_or)):
        compare_to_numpy(vg_fn, np_fn, [arr, other])
        compare_to_numpy(vg_fn, np_fn, [arr, True])


# -- broadcasting -------------------------------------------------------------------------------
def test_none_dim_that_is_one_at_run_time_broadcasts():
    """numpy semantics at run time: a None dimension that turns out to be 1 broadcasts."""
    a = vg.tensor("a", (None, 4), "float64")
    b = vg.tensor("b", (None, None), "float64")
    f = vg.compile([a, b], a + b, mode="reference")
    av, bv = np.arange(12.0).reshape(3, 4), np.arange(4.0).reshape(1, 4)
    np.testing.assert_array_equal(f(av, bv), av + bv)
    np.testing.assert_array_equal(f(av[:1], np.ones((5, 4))), av[:1] + np.ones((5, 4)))
    np.testing.assert_array_equal(f(av, np.ones((3, 1))), av + 1)
    np.testing.assert_array_equal(f(np.ones((1, 4)), np.ones((6, 1))), np.full((6, 4), 2.0))
    # 1 against 0 gives 0, as numpy
    assert f(np.ones((1, 4)), np.ones((0, 4))).shape == (0, 4)


def test_none_dim_against_static_dim():
    a = vg.tensor("a", (None,), "float32")
    b = vg.tensor("b", (5,), "float32")
    y = a * b
    assert y.type.shape == (5,)
    f = vg.compile([a, b], y, mode="reference")
    np.testing.assert_array_equal(f(np.full(1, 2, "float32"), np.ones(5, "float32")),
                                  np.full(5, 2, "float32"))
    with pytest.raises(ValueError, match="mul"):
        f(np.ones(3, "float32"), np.ones(5, "float32"))


def test_static_broadcast_shapes():
    t = vg.tensor
    assert (t("a", (3, 1)) + t("b", (4,))).type.shape == (3, 4)
    assert (t("a", (None, 1)) + t("b", (1, None))).type.shape == (None, None)
    assert (t("a", (1, 1)) + t("b", (1,))).type.shape == (1, 1)
    assert (t("a", (0, 1)) + t("b", (None, 2))).type.shape == (0, 2)
    assert (t("a", ()) + t("b", (2, 3))).type.shape == (2, 3)


@pytest.mark.parametrize("name, op_name", [("add", "add"), ("maximum", "maximum"), ("lt", "lt"),
                                           ("bitwise_and", "and"), ("true_divide", "div")])
def test_static_shape_mismatch_raises_naming_op_and_shapes(name, op_name):
    vg_fn, _ = BINARY[name]
    a = vg.tensor("a", (2, 3), "int32")
    b = vg.tensor("b", (None, 4), "int32")
    with pytest.raises(ValueError, match=op_name) as info:
        vg_fn(a, b)
    assert "(2, 3)" in str(info.value) and "(?, 4)" in str(info.value)
    with pytest.raises(ValueError, match="switch"):  # where is Elemwise{switch}
        vg.where(vg.tensor("c", (2,), "bool"), vg.tensor("x", (3,)), 0.0)


def test_run_time_broadcast_failure_names_the_op():
    a, b = vg.tensor("a", (None,)), vg.tensor("b", (None,))
    f = vg.compile([a, b], vg.true_divide(a, b), mode="reference")
    with pytest.raises(ValueError, match="true_div") as info:
        f(np.ones(3), np.ones(4))
    assert "(3,)" in str(info.value) and "(4,)" in str(info.value)


def test_wrong_types_raise_type_error():
    x = vg.tensor("x", (None,), "float64")
    b = vg.tensor("b", (None,), "bool")
    for bad in ("a", None, object(), [1, "a"]):
        with pytest.raises(TypeError):
            x + bad
    with pytest.raises(TypeError, match="bitwise_and|and"):
        x & x
    with pytest.raises(TypeError):
        ~x
    with pytest.raises(TypeError, match="neg"):
        -b
    with pytest.raises(TypeError, match="sign"):
        vg.sign(b)
    with pytest.raises(TypeError):
        b - b
    with pytest.raises(TypeError):
        vg.exp(x, x)
    with pytest.raises(TypeError):
        bool(x > 0)


# -- DimShuffle: transpose, expand_dims, squeeze, .T ----------------------------------------------
@FEW
@given(shape=shapes(max_dims=4), dtype=dtypes(), layout=layouts(), seed=seeds(), data=st.data())
def test_transpose_matches_numpy(shape, dtype, layout, seed, data):
    perm = tuple(data.draw(st.permutations(range(len(shape)))))
    arr = with_layout(random_array(np.random.default_rng(seed), dtype, shape), layout)
    static = [data.draw(symbolic_shape(shape))]
    compare_to_numpy(lambda x: vg.transpose(x, perm), lambda x: np.transpose(x, perm), [arr],
                     static)
    compare_to_numpy(vg.transpose, np.transpose, [arr], static)
    compare_to_numpy(lambda x: x.T, lambda x: x.T, [arr], static)
    compare_to_numpy(lambda x: x.transpose(*perm), lambda x: x.transpose(*perm), [arr], static)
    neg = tuple(p - len(shape) for p in perm)
    compare_to_numpy(lambda x: vg.transpose(x, neg), lambda x: np.transpose(x, neg), [arr])


@FEW
@given(shape=shapes(max_dims=3), seed=seeds(), data=st.data())
def test_expand_dims_matches_numpy(shape, seed, data):
    out_ndim = len(shape) + data.draw(st.integers(1, 2))
    axes = data.draw(st.lists(st.integers(-out_ndim, out_ndim - 1), min_size=out_ndim - len(shape),
                              max_size=out_ndim - len(shape),
                              unique_by=lambda a: a % out_ndim))
    axis = axes[0] if len(axes) == 1 and data.draw(st.booleans()) else tuple(axes)
    arr = random_array(np.random.default_rng(seed), "float64", shape)
    compare_to_numpy(lambda x: vg.expand_dims(x, axis), lambda x: np.expand_dims(x, axis),
                     [arr], [data.draw(symbolic_shape(shape))])


@FEW
@given(shape=shapes(max_dims=4, min_side=1, max_side=3), seed=seeds(), data=st.data())
def test_squeeze_matches_numpy(shape, seed, data):
    ones = [i for i, s in enumerate(shape) if s == 1]
    arr = with_layout(random_array(np.random.default_rng(seed), "int32", shape),
                      data.draw(layouts()))
    # a None dimension may be squeezed: it must be 1 at run time
    compare_to_numpy(lambda x: vg.squeeze(x, tuple(ones)), lambda x: np.squeeze(x, tuple(ones)),
                     [arr], [data.draw(symbolic_shape(shape))])
    # squeeze() with no axis drops the dimensions statically known to be 1
    compare_to_numpy(vg.squeeze, np.squeeze, [arr], [shape])
    if ones:
        neg = ones[-1] - len(shape)
        compare_to_numpy(lambda x: vg.squeeze(x, neg), lambda x: np.squeeze(x, neg), [arr])


def test_dimshuffle_combines_and_views():
    arr = np.arange(6.0).reshape(2, 1, 3)
    compare_to_numpy(lambda x: x.dimshuffle(2, "x", 0), lambda x: x[:, 0, :].T[:, None, :],
                     [arr], [(2, 1, 3)])
    x = vg.tensor("x", (2, None, 3))
    assert vg.transpose(vg.transpose(x)).type.shape == (2, None, 3)
    assert vg.transpose(x, (0, 1, 2)) is x
    assert vg.expand_dims(x, 0).type.shape == (1, 2, None, 3)


def test_dimshuffle_errors():
    x = vg.tensor("x", (2, None, 3))
    with pytest.raises(ValueError, match="squeeze"):
        vg.squeeze(x, 0)
    with pytest.raises(ValueError, match="transpose"):
        vg.transpose(x, (0, 1))
    with pytest.raises(ValueError, match="transpose"):
        vg.transpose(x, (0, 0, 1))
    with pytest.raises(ValueError, match="expand_dims"):
        vg.expand_dims(x, 5)
    with pytest.raises(ValueError):
        vg.squeeze(x, 3)
    f = vg.compile([x], vg.squeeze(x, 1), mode="reference")
    np.testing.assert_array_equal(f(np.ones((2, 1, 3))), np.ones((2, 3)))
    with pytest.raises(ValueError, match="axis 1"):
        f(np.ones((2, 4, 3)))
