"""Types, ops, variables and nodes; bad input raises errors that name the op and the types."""

import pickle

import numpy as np
import pytest

from tests.graph.utils import Cast, Elemwise, add, const, matrix, mul, scalar, sin, split, vector
from verglas.graph import Apply, Constant, Op, ScalarType, TensorType, Variable


class TestTypes:
    def test_tensor_type_value_semantics(self):
        t = TensorType("float64", (None, 3))
        assert t == TensorType(np.float64, [None, 3])
        assert hash(t) == hash(TensorType("float64", (None, 3)))
        assert t != TensorType("float32", (None, 3))
        assert t != TensorType("float64", (None, None))
        assert t.ndim == 2 and t.shape == (None, 3) and t.dtype == "float64"
        assert len({t, TensorType("float64", (None, 3))}) == 1

    def test_types_are_immutable(self):
        t = TensorType("float64", (2,))
        with pytest.raises(AttributeError):
            t.dtype = "float32"
        with pytest.raises(AttributeError):
            ScalarType("int64").dtype = "int32"

    def test_scalar_type(self):
        assert ScalarType("float32") == ScalarType(np.float32)
        assert ScalarType("float32") != TensorType("float32", ())
        assert ScalarType("int8").ndim == 0

    def test_bad_types(self):
        with pytest.raises(ValueError, match="negative"):
            TensorType("float64", (-1,))
        with pytest.raises(TypeError, match="unsupported dtype"):
            TensorType("object", ())

    def test_clone_and_is_super(self):
        t = TensorType("float64", (None, 3))
        assert t.clone() is t
        assert t.clone(dtype="float32") == TensorType("float32", (None, 3))
        assert t.is_super(TensorType("float64", (5, 3)))
        assert not TensorType("float64", (5, 3)).is_super(t)

    def test_pickle(self):
        for t in (TensorType("int32", (None, 2)), ScalarType("bool")):
            assert pickle.loads(pickle.dumps(t)) == t


class PlainOp(Op):
    def make_node(self, x):
        return Apply(self, [x], [x.type])


class OtherElemwise(Elemwise):
    pass


class TestOp:
    def test_props_equality_and_hash(self):
        assert Elemwise("add", 2) == add and hash(Elemwise("add", 2)) == hash(add)
        assert Elemwise("add", 2) is not add
        assert add != mul
        assert Elemwise("add", 3) != add
        # the class is part of the identity of an op
        assert OtherElemwise("add", 2) != add
        assert Cast("float32") == Cast("float32") != Cast("int64")
        assert PlainOp() == PlainOp() and hash(PlainOp()) == hash(PlainOp())
        assert {add: 1}[Elemwise("add", 2)] == 1

    def test_repr_and_match_args(self):
        assert repr(Cast("int8")) == "Cast{dtype='int8'}"
        assert Cast.__match_args__ == ("dtype",)
        match Cast("int8"):
            case Cast("int8"):
                pass
            case _:
                pytest.fail("match on props failed")

    def test_pickle_drops_cached_hash(self):
        op = Elemwise("sin", 1)
        hash(op)
        assert "_op_hash" not in op.__getstate__()
        assert pickle.loads(pickle.dumps(op)) == op

    def test_clone_is_self(self):
        assert add.clone() is add


class TestVariableApply:
    def test_apply_outputs(self):
        x, y = vector("x"), vector("y")
        z = add(x, y)
        node = z.owner
        assert isinstance(node, Apply) and node.op is add
        assert node.inputs == [x, y] and isinstance(node.inputs, list)
        assert z.index == 0 and z.type == x.type and node.out is z
        a, b = split(x)
        assert (a.owner, a.index, b.index) == (b.owner, 0, 1)
        assert x.owner is None and x.name == "x"

    def test_clone_with_new_inputs(self):
        x, y, w = vector("x"), vector("y"), vector("w")
        node = add(x, y).owner
        new = node.clone_with_new_inputs([w, y])
        assert new.op is add and new.inputs == [w, y] and new is not node
        with pytest.raises(ValueError, match="expected 2 inputs"):
            node.clone_with_new_inputs([w])

    def test_non_variable_input(self):
        with pytest.raises(TypeError, match="input 1 is int, not a Variable"):
            Apply(add, [vector(), 3], [vector().type])

    def test_constant(self):
        c = const([1.0, 2.0])
        assert isinstance(c, Constant) and c.owner is None
        with pytest.raises(ValueError):
            c.data[0] = 3.0  # read-only
        with pytest.raises(ValueError, match="does not match"):
            Constant(TensorType("float64", (3,)), [1.0, 2.0])
        assert repr(const(2.5)) == "2.5"


class TestBadInput:
    def test_incompatible_dtypes_name_op_and_types(self):
        with pytest.raises(TypeError, match=r"add.*float64.*float32"):
            add(vector(dtype="float64"), vector(dtype="float32"))

    def test_incompatible_ndim(self):
        with pytest.raises(TypeError, match=r"mul.*shape=\(\?,\).*shape=\(\?, \?\)"):
            mul(vector(), matrix())

    def test_incompatible_static_shapes(self):
        a = Variable(TensorType("float64", (2,)))
        b = Variable(TensorType("float64", (3,)))
        with pytest.raises(ValueError, match=r"add.*\(2,\).*\(3,\)"):
            add(a, b)

    def test_wrong_arity_and_non_variables(self):
        with pytest.raises(TypeError, match="sin: expected 1 inputs, got 2"):
            sin(scalar(), scalar())
        with pytest.raises(TypeError, match="sin: input 0 is not a tensor variable"):
            sin(1.0)
