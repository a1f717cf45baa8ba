"""The Function contract (DESIGN.md, "Calling a Function"), checked with the reference executor.

Conversion rule, as verglas/graph/types.py implements it:
- an array (or array-like: list, tuple) converts when `np.can_cast(its dtype, the input's dtype,
  "safe")`; otherwise TypeError naming the input (position and name) and both dtypes;
- a 0-d value (Python int/float/bool, numpy scalar, 0-d array) also converts when its *value*
  survives the round trip exactly: 2.5 or 3 into a float32 scalar input are fine, 0.1 or
  2**25 + 1 are not (TypeError), 5 into int8 is fine, 1000 is not; 2.0 into an int32 input is
  accepted (the value is exact), 2.5 is not.
"""

import dataclasses
import pickle

import cloudpickle
import numpy as np
import pytest

import verglas as vg
from verglas.graph.fg import MissingInputError


def _ref(inputs, outputs):
    return vg.compile(inputs, outputs, mode="reference")


@pytest.fixture
def xy():
    x = vg.tensor("x", (None, 3), "float32")
    y = vg.scalar("y", "float64")
    return x, y


# -- conversion of arguments ------------------------------------------------------------------
def test_array_likes_and_safe_casts_are_converted(xy):
    x, y = xy
    f = _ref([x, y], x * 2 + y)
    expected = np.array([[2, 4, 6]], "float32") + 1.0
    for arg in (np.array([[1, 2, 3]], "int16"), np.array([[1, 2, 3]], "float16"),
                np.array([[1, 2, 3]], "uint8")):
        got = f(arg, 1)
        np.testing.assert_array_equal(got, expected)
        assert got.dtype == np.float64  # float32 * 2 + float64 scalar
    np.testing.assert_array_equal(f(np.ones((2, 3), bool), np.float32(1.5)),
                                  np.full((2, 3), 3.5))
    v = vg.tensor("v", (None,), "float64")
    g = _ref([v], v + 1)
    for arg in ([1, 2, 3], (1.0, 2.0, 3.0), [True, False, True], np.arange(3, dtype="int32")):
        np.testing.assert_array_equal(g(arg), np.asarray(arg, "float64") + 1)


def test_unsafe_array_cast_is_a_type_error_naming_input(xy):
    x, y = xy
    f = _ref([y, x], x * y)
    with pytest.raises(TypeError) as info:
        f(1.0, np.ones((2, 3), "float64"))
    msg = str(info.value)
    assert "input 1" in msg and "'x'" in msg and "float32" in msg and "float64" in msg
    with pytest.raises(TypeError, match="int64"):
        f(1.0, np.ones((2, 3), "int64"))  # int64 -> float32 is not safe
    with pytest.raises(TypeError, match="'y'"):
        f(np.array(1.0, "complex128"), np.ones((2, 3), "float32"))
    with pytest.raises(TypeError):
        f(1.0, [["a", "b", "c"]])
    with pytest.raises(TypeError):
        f(None, np.ones((2, 3), "float32"))


def test_ragged_list_is_a_type_error_naming_input():
    v = vg.tensor("v", (None, None))
    with pytest.raises(TypeError, match="'v'"):
        _ref([v], v)([[1.0, 2.0], [3.0]])


def test_python_scalars_convert_when_the_value_survives():
    s32 = vg.scalar("s", "float32")
    i8 = vg.scalar("i", "int8")
    i32 = vg.scalar("k", "int32")
    f = _ref([s32, i8, i32], [s32 * 1, i8 * 1, i32 * 1])
    got = f(2.5, 5, 7)
    assert [g.dtype for g in got] == [np.float32, np.int8, np.int32]
    assert got[0] == 2.5 and got[1] == 5 and got[2] == 7
    f(3, True, np.int64(2))
    f(np.float64(0.5), np.array(3), 2.0)  # 2.0 into int32: the value is exact
    f(float("inf"), -128, -(2**31))
    assert np.isnan(f(float("nan"), 0, 0)[0])
    for bad in ((0.1, 1, 1), (2**25 + 1, 1, 1), (1.0, 1000, 1), (1.0, 1.5, 1), (1.0, 1, 2.5),
                (1.0, 1, 2**31), (np.array(0.1), 1, 1), (1e300, 1, 1)):
        with pytest.raises(TypeError, match="expected dtype"):
            f(*bad)


def test_wrong_argument_count_and_ndim_are_type_errors(xy):
    x, y = xy
    f = _ref([x, y], x + y)
    with pytest.raises(TypeError, match="2 inputs"):
        f(np.ones((1, 3), "float32"))
    with pytest.raises(TypeError, match="2 inputs"):
        f(np.ones((1, 3), "float32"), 1.0, 2.0)
    with pytest.raises(TypeError, match="ndim"):
        f(np.ones(3, "float32"), 1.0)
    with pytest.raises(TypeError, match="'y'"):
        f(np.ones((1, 3), "float32"), [1.0])
    with pytest.raises(TypeError):
        f(x=np.ones((1, 3), "float32"), y=1.0)


def test_static_shape_contradiction_is_a_value_error_naming_input(xy):
    x, y = xy
    f = _ref([y, x], x + y)
    with pytest.raises(ValueError) as info:
        f(1.0, np.ones((2, 4), "float32"))
    assert "'x'" in str(info.value) and "dimension 1" in str(info.value)
    assert f(1.0, np.ones((0, 3), "float32")).shape == (0, 3)


def test_run_time_broadcast_error_is_a_value_error_naming_op():
    a, b = vg.tensor("a", (None,)), vg.tensor("b", (None, None))
    f = _ref([a, b], vg.maximum(a, b))
    assert f(np.ones(1), np.ones((2, 5))).shape == (2, 5)
    with pytest.raises(ValueError, match="maximum"):
        f(np.ones(3), np.ones((2, 5)))


# -- inputs are never modified ----------------------------------------------------------------
def test_inputs_are_never_modified():
    x = vg.tensor("x", (None, None))
    y = vg.tensor("y", (None,), "int32")
    outs = [x, x.T, vg.exp(x), x * y, y, vg.squeeze(vg.expand_dims(y, 0), 0), -y]
    f = _ref([x, y], outs)
    rng = np.random.default_rng(0)
    xv = rng.normal(size=(3, 4))[:, ::-1]  # non-contiguous
    yv = np.arange(4, dtype="int32")
    ro = yv.copy()
    ro.setflags(write=False)
    for xs, ys in ((xv, yv), (np.ascontiguousarray(xv), ro)):
        copies = (xs.copy(), ys.copy())
        flags = (xs.flags.writeable, ys.flags.writeable)
        results = f(xs, ys)
        for r in results:
            r[...] = 0  # writing into the outputs cannot reach the inputs
        np.testing.assert_array_equal(xs, copies[0])
        np.testing.assert_array_equal(ys, copies[1])
        assert (xs.flags.writeable, ys.flags.writeable) == flags


# -- outputs -----------------------------------------------------------------------------------
def test_one_output_variable_gives_one_array_a_list_gives_a_list(xy):
    x, y = xy
    xv = np.ones((2, 3), "float32")
    single = _ref([x, y], x + y)(xv, 1.0)
    assert isinstance(single, np.ndarray) and single.shape == (2, 3)
    one = _ref([x, y], [x + y])(xv, 1.0)
    assert isinstance(one, list) and len(one) == 1
    two = _ref([x, y], (x + y, y))(xv, 1.0)
    assert isinstance(two, list) and len(two) == 2
    scalar = _ref([y], y * 2)(1.5)
    assert isinstance(scalar, np.ndarray) and scalar.shape == () and scalar == 3.0
    assert _ref([x, y], [])(xv, 1.0) == []


def test_outputs_are_fresh_arrays_the_caller_owns():
    x = vg.tensor("x", (None,))
    c = vg.constant(np.arange(3.0))
    f = _ref([x], [x, x, c, c, x.T, vg.exp(x), vg.exp(x)])
    xv = np.arange(3.0)
    out = f(xv)
    for k, o in enumerate(out):
        assert isinstance(o, np.ndarray) and o.flags.writeable, k
        assert not np.shares_memory(o, xv), k
        for j in range(k):
            assert not np.shares_memory(o, out[j]), (j, k)
    np.testing.assert_array_equal(out[0], xv)
    np.testing.assert_array_equal(out[2], np.arange(3.0))
    out[2][0] = 100  # mutating a result does not change the constant
    np.testing.assert_array_equal(f(xv)[2], np.arange(3.0))
    # an input given read-only and returned as is: a writable copy comes back
    ro = np.arange(3.0)
    ro.setflags(write=False)
    again = _ref([x], x)(ro)
    assert again.flags.writeable and not np.shares_memory(again, ro)


def test_repeated_calls_are_independent():
    x = vg.tensor("x", (None,))
    f = _ref([x], x * 2)
    a = f(np.ones(2))
    b = f(np.full(2, 3.0))
    np.testing.assert_array_equal(a, [2.0, 2.0])
    np.testing.assert_array_equal(b, [6.0, 6.0])


# -- pickling ------------------------------------------------------------------------------------
@pytest.mark.parametrize("dumps", [pickle.dumps, cloudpickle.dumps])
def test_pickle_round_trip(dumps):
    x = vg.tensor("x", (None, 3), "float32")
    s = vg.scalar("s", "int32")
    outs = [vg.where(x > 0, vg.exp(x), x * s), vg.maximum(x, 1.5).T, s // 2]
    f = _ref([x, s], outs)
    g = pickle.loads(dumps(f))
    assert g.graph == f.graph
    assert g.input_names == ["x", "s"]
    xv = np.random.default_rng(1).normal(size=(4, 3)).astype("float32")
    for a, b in zip(f(xv, 3), g(xv, 3)):
        np.testing.assert_array_equal(a, b)
        assert a.dtype == b.dtype
    single = pickle.loads(dumps(_ref([x], vg.sin(x))))
    assert isinstance(single(xv), np.ndarray)
    with pytest.raises(TypeError, match="'x'"):
        g(xv.astype("float64"), 3)


# -- compile() argument errors ---------------------------------------------------------------
def test_compile_argument_errors():
    x, y = vg.tensor("x", (None,)), vg.tensor("y", (None,))
    with pytest.raises(TypeError, match="input 1"):
        vg.compile([x, np.ones(3)], x)
    with pytest.raises(TypeError, match="input 0"):
        vg.compile(["x"], x)
    with pytest.raises(TypeError, match="constant"):
        vg.compile([vg.constant(np.ones(3))], x)
    with pytest.raises(TypeError, match="root variable"):
        vg.compile([x + 1], x)
    with pytest.raises(ValueError, match="twice"):
        vg.compile([x, x], x)
    with pytest.raises(ValueError, match="device"):
        vg.compile([x], x, device="tpu")
    with pytest.raises(ValueError, match="mode"):
        vg.compile([x], x, mode="fastest")
    with pytest.raises(TypeError, match="output 1"):
        vg.compile([x], [x, 2.0])
    with pytest.raises(MissingInputError, match="y"):
        vg.compile([x], x + y, mode="reference")
    f = vg.compile(x, x + 1, mode="reference")  # a single input variable is accepted too
    np.testing.assert_array_equal(f([1.0]), [2.0])
    # an unused input is fine, and its argument is still checked
    f = _ref([x, y], x * 2)
    np.testing.assert_array_equal(f([1.0], [5.0, 6.0]), [2.0])
    with pytest.raises(TypeError, match="'y'"):
        f([1.0], [[5.0]])


def test_asnumpy_and_repr():
    x = vg.tensor("x", (None,))
    f = _ref([x], vg.exp(x))
    assert "x" in repr(f)
    arr = np.ones(2)
    assert vg.asnumpy(arr) is arr
    np.testing.assert_array_equal(vg.asnumpy([1, 2]), [1, 2])


def test_a_cached_program_takes_the_callers_input_names_without_changing():
    """A Program is immutable: a second Function over the same graph (its Program loaded from
    the cache) gets a copy printing its own input names."""
    x = vg.tensor("x", shape=(None,))
    f = vg.compile([x], vg.exp(x) * 3.0)
    y = vg.tensor("y", shape=(None,))
    g = vg.compile([y], vg.exp(y) * 3.0)
    assert "y.shape[0]" in str(g.program) and "x.shape" not in str(g.program)
    assert "x.shape[0]" in str(f.program)
    program = f.program
    assert program.with_input_names(program.input_names) is program
    renamed = program.with_input_names(["z"])
    assert renamed.input_names == ("z",) and "z.shape[0]" in str(renamed)
    assert program.input_names == ("x",) and "x.shape[0]" in str(program)
    with pytest.raises(dataclasses.FrozenInstanceError):
        program.input_names = ("w",)
