"""Scalar ops: numpy result dtypes, the scalar `impl` against the numpy reference, equality,
pickling and the registry. (Elementwise behaviour on arrays is in test_elemwise.py.)"""

import itertools
import math
import pickle

import numpy as np
import pytest

import verglas as vg
from verglas.ops import scalar as s
from verglas.ops.elemwise import Elemwise

ALL_DTYPES = ("bool", "int8", "int32", "int64", "uint8", "float16", "float32", "float64")
OPS = {name: (cls() if name != "cast" else cls("float32")) for name, cls in s.SCALAR_OPS.items()}

# Values where the Python `impl` and numpy agree by definition (no division by zero, no
# negative base to a fractional power: numba's math differs from Python's there).
SAFE_FLOATS = [-2.5, -1.0, -0.5, 0.0, 0.25, 1.0, 3.0]
SAFE_INTS = [-7, -3, -1, 0, 1, 2, 5]
POSITIVE = {"log", "sqrt", "log1p", "pow"}
NONZERO_DIVISOR = {"true_div", "floor_div", "mod", "reciprocal"}
INT_ONLY = {"invert", "and_", "or_", "xor", "left_shift", "right_shift"}


def test_registry_has_every_scalar_op():
    expected = {"neg", "abs", "sign", "exp", "log", "log1p", "expm1", "sqrt", "sin", "cos", "tan",
                "tanh", "sigmoid", "softplus", "erf", "sqr", "reciprocal", "floor", "ceil",
                "isnan", "isinf", "invert", "identity", "cast", "add", "sub", "mul", "true_div",
                "floor_div", "mod", "pow", "maximum", "minimum", "lt", "le", "gt", "ge", "eq",
                "neq", "and_", "or_", "xor", "switch", "second"}
    assert expected <= set(s.SCALAR_OPS)
    for name, cls in s.SCALAR_OPS.items():
        assert OPS[name].name.startswith(name.split("<")[0]) or name == "cast"
        assert cls.nin == len(inspect_params(cls.impl)), name
        # module-level name: pickling finds the class again
        assert getattr(s, cls.__qualname__) is cls, name


def inspect_params(fn):
    import inspect

    return inspect.signature(fn).parameters


@pytest.mark.parametrize("name", sorted(s.SCALAR_OPS))
def test_output_dtypes_follow_numpy(name):
    op = OPS[name]
    for dts in itertools.product(ALL_DTYPES, repeat=op.nin):
        try:
            with np.errstate(all="ignore"):
                expected = op.nfunc(*[np.ones(2, d) for d in dts])
        except TypeError:
            with pytest.raises(TypeError, match=op.name.split("<")[0]):
                op.output_dtypes(*dts)
            continue
        expected = expected if isinstance(expected, tuple) else (expected,)
        assert op.output_dtypes(*dts) == tuple(np.asarray(e).dtype.name for e in expected)
        if op.ufunc is not None:
            loop = op.ufunc.resolve_dtypes(tuple(map(np.dtype, dts)) + (None,))
            assert op.output_dtypes(*dts) == tuple(d.name for d in loop[op.nin:])


def test_numpy_dtype_examples():
    assert s.Sqr().output_dtypes("bool") == ("int8",)
    assert s.Exp().output_dtypes("int32") == ("float64",)
    assert s.Exp().output_dtypes("bool") == ("float16",)
    assert s.Sigmoid().output_dtypes("int64") == ("float64",)
    assert s.TrueDiv().output_dtypes("int32", "int32") == ("float64",)
    assert s.FloorDiv().output_dtypes("bool", "bool") == ("int8",)
    assert s.Add().output_dtypes("bool", "bool") == ("bool",)
    assert s.Lt().output_dtypes("float32", "int64") == ("bool",)
    assert s.Switch().output_dtypes("bool", "int8", "float32") == ("float32",)
    assert s.Second().output_dtypes("float64", "int8") == ("int8",)
    assert s.Cast("int16").output_dtypes("float64") == ("int16",)
    for op in (s.Neg(), s.Sign()):
        with pytest.raises(TypeError, match=op.name):
            op.output_dtypes("bool")
    with pytest.raises(TypeError, match="invert"):
        s.Invert().output_dtypes("float32")


def _domain(name, kind):
    values = SAFE_INTS if kind == "i" else SAFE_FLOATS
    if name in POSITIVE:
        values = [v for v in values if v > 0]
    return values


@pytest.mark.parametrize("name", sorted(set(s.SCALAR_OPS) - {"cast"}))
@pytest.mark.parametrize("kind", ["f", "i"])
def test_impl_matches_numpy_reference(name, kind):
    """The scalar `impl` (what the backends compile) agrees with `nfunc` on Python scalars."""
    op = OPS[name]
    if (kind == "f" and name in INT_ONLY) or (kind == "i" and name == "pow"):
        return
    dtype = "float64" if kind == "f" else "int64"
    values = _domain(name, kind)
    for args in itertools.product(values, repeat=op.nin):
        if name == "switch":
            args = (bool(args[0]),) + args[1:]
        if name in NONZERO_DIVISOR and args[-1] == 0:
            continue
        with np.errstate(all="ignore"):
            expected = np.asarray(op.nfunc(*[np.asarray(a, dtype if not isinstance(a, bool)
                                                           else "bool") for a in args]))
        got = op.impl(*args)
        np.testing.assert_allclose(float(got), expected.astype("float64"), rtol=1e-12,
                                   atol=1e-300, equal_nan=True, err_msg=f"{name}{args}")


@pytest.mark.parametrize("name", ["exp", "log", "sqrt", "sigmoid", "softplus", "tanh", "sign",
                                  "isnan", "isinf", "maximum", "minimum", "abs", "floor", "erf",
                                  "log1p", "expm1"])
def test_impl_special_values(name):
    op = OPS[name]
    specials = [math.nan, math.inf, -math.inf, 0.0, -0.0, 800.0, -800.0]
    for args in itertools.product(specials, repeat=op.nin):
        if name == "floor" and not math.isfinite(args[0]):
            continue  # Python's math.floor refuses inf/nan; numba returns them
        with np.errstate(all="ignore"):
            expected = np.asarray(op.nfunc(*[np.asarray(a) for a in args]), dtype="float64")
        try:
            got = float(op.impl(*args))
        except (OverflowError, ValueError):
            continue  # Python math raises where numba/numpy return inf/nan
        np.testing.assert_allclose(got, expected, rtol=1e-12, equal_nan=True,
                                   err_msg=f"{name}{args}")


def test_equality_hash_and_props():
    assert s.Add() == s.Add() and hash(s.Add()) == hash(s.Add())
    assert s.Add() != s.Sub()
    assert s.Cast("float32") == s.Cast(np.float32) != s.Cast("int32")
    assert hash(s.Cast("float32")) == hash(s.Cast("float32"))
    assert Elemwise(s.Exp()) == Elemwise(s.Exp()) != Elemwise(s.Log())
    assert repr(Elemwise(s.Exp())) == "Elemwise{exp}"
    assert "float32" in repr(s.Cast("float32"))
    assert s.Add().fingerprint_key() == s.Add().fingerprint_key()
    assert s.Cast("int8").fingerprint_key() != s.Cast("int16").fingerprint_key()


@pytest.mark.parametrize("name", sorted(s.SCALAR_OPS))
def test_scalar_ops_pickle(name):
    op = OPS[name]
    for proto in (2, pickle.HIGHEST_PROTOCOL):
        again = pickle.loads(pickle.dumps(op, proto))
        assert again == op and hash(again) == hash(op) and type(again) is type(op)
        assert pickle.loads(pickle.dumps(Elemwise(op), proto)) == Elemwise(op)


def test_flags():
    for name in ("add", "mul", "maximum", "minimum", "eq", "neq", "and_", "or_", "xor"):
        assert OPS[name].commutative, name
        a, b = np.array([1, 5, -2]), np.array([3, -1, -2])
        np.testing.assert_array_equal(OPS[name].nfunc(a, b), OPS[name].nfunc(b, a))
    for name in ("sub", "true_div", "pow", "lt"):
        assert not OPS[name].commutative
    assert {n for n, op in OPS.items() if op.comparison} == {"lt", "le", "gt", "ge", "eq", "neq"}
    assert s.Add.ufunc is np.add and s.TrueDiv.ufunc is np.true_divide


def test_elemwise_construction_errors():
    with pytest.raises(TypeError, match="ScalarOp"):
        Elemwise(np.add)
    x = vg.tensor("x", (None,))
    with pytest.raises(TypeError, match="expected 2 inputs"):
        Elemwise(s.Add())(x)
    with pytest.raises(TypeError, match="expected 1 inputs"):
        Elemwise(s.Exp())(x, x)


def test_non_differentiable_ops_have_no_gradient():
    x = vg.tensor("x", (None,))
    y = vg.tensor("y", (None,))
    for cls in (s.Lt, s.Eq, s.Neq):
        assert cls().grad([x, y], [x < y], [x]) == [None, None]
    assert s.Isnan().grad([x], [vg.isnan(x)], [x]) == [None]
    i = vg.tensor("i", (None,), "int32")
    assert s.Exp().grad([i], [vg.exp(i)], [x]) == [None]
    assert s.Cast("int32").grad([x], [x.astype("int32")], [x]) == [None]
