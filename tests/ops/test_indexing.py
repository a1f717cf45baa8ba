"""Basic and advanced indexing, set_subtensor / inc_subtensor, against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import verglas as vg
from tests.helpers import (SETTINGS, compare_to_numpy, dtypes, layouts, random_array, seeds,
                           shapes, symbolic_shape, with_layout)
from tests.ops.shape_check import check_infer_shape
from verglas.ops.indexing import (AdvancedIncSubtensor, AdvancedSubtensor, IncSubtensor,
                                  Subtensor)
from verglas.testing import verify_grad

SYM = "sym"  # marks an index component passed as a symbolic 0-d int64 input


@st.composite
def basic_index(draw, shape, symbolic=True):
    """(index template, symbolic values): ints, slices (any bounds/steps), None, Ellipsis."""
    items, axis, values = [], 0, []
    use_ellipsis = draw(st.booleans())
    n_idx = draw(st.integers(0, len(shape)))

    def comp(value):
        if symbolic and value is not None and draw(st.booleans()):
            values.append(np.int64(value))
            return SYM
        return value

    while axis < n_idx:
        kind = draw(st.sampled_from(["int", "slice", "slice", "none"]))
        if kind == "none":
            items.append(None)
            continue
        n = shape[axis]
        if kind == "int" and n > 0:
            items.append(comp(draw(st.integers(-n, n - 1))))
        else:
            bound = st.one_of(st.none(), st.integers(-n - 2, n + 2))
            step = draw(st.one_of(st.none(), st.sampled_from([1, 2, 3, -1, -2])))
            items.append(slice(comp(draw(bound)), comp(draw(bound)), comp(step)))
        axis += 1
    if use_ellipsis:
        # items were drawn for the leading axes: an Ellipsis after them keeps them aligned
        # (one earlier would shift them onto trailing axes they were not drawn for)
        items.append(Ellipsis)
    return tuple(items), values


def _fill(template, syms):
    it = iter(syms)

    def one(c):
        return next(it) if isinstance(c, str) and c == SYM else c

    out = []
    for item in template:
        if isinstance(item, slice):
            out.append(slice(one(item.start), one(item.stop), one(item.step)))
        else:
            out.append(one(item))
    return tuple(out)


@SETTINGS
@given(shapes(max_dims=4), dtypes(), seeds(), layouts(), st.data())
def test_basic_indexing(shape, dtype, seed, layout, data):
    x = with_layout(random_array(np.random.default_rng(seed), dtype, shape), layout)
    template, values = data.draw(basic_index(shape))
    static = data.draw(symbolic_shape(shape))
    arrays = [x] + [np.asarray(v) for v in values]
    compare_to_numpy(lambda v, *s: v[_fill(template, s)], lambda a, *s: a[_fill(template, s)],
                     arrays, static_shapes=[static] + [()] * len(values))
    check_infer_shape(lambda v, *s: v[_fill(template, s)], arrays,
                      static_shapes=[static] + [()] * len(values))
    # the static shape is exact when the input's shape is static and indices are constants
    if not values:
        out = vg.tensor("x", shape=shape, dtype=dtype)[template]
        assert out.type.shape == x[template].shape


def test_basic_indexing_is_a_view_op():
    x = vg.tensor("x", shape=(None, 4))
    node = x[1:, 2].owner
    assert isinstance(node.op, Subtensor) and node.op.view_map == {0: [0]}
    assert node.op == x[2:, 0].owner.op  # index values are inputs; the structure is the op
    assert node.op.idx_list == (("slice", True, False, False), "int")
    match node.op:
        case Subtensor(idx_list):
            assert len(idx_list) == 2
    assert x[:, None, ..., 0].owner.op.idx_list == (("slice", False, False, False), "newaxis",
                                                     "int")


def _advanced_case(draw, shape, rng):
    """A numpy index mixing integer arrays or one bool mask with ints, slices and None."""
    items, axis = [], 0
    n_idx = draw(st.integers(1, len(shape)))
    forced = draw(st.integers(0, n_idx - 1))  # this axis gets an array or a mask
    family = draw(st.sampled_from([[(3,), (2, 1), (1,), ()], [(0,), (1,)]]))
    has_mask = has_array = False
    while axis < n_idx:
        n = shape[axis]
        kind = draw(st.sampled_from(["array", "array", "mask", "int", "slice", "none"]))
        if axis == forced and kind in ("int", "slice", "none"):
            kind = "array"
        if kind == "mask" and has_array:
            kind = "array"
        if kind == "array" and has_mask:
            kind = "int"
        if kind == "none":
            items.append(None)
            continue
        if kind == "mask":
            k = draw(st.integers(1, min(2, n_idx - axis)))
            items.append(rng.random(shape[axis:axis + k]) < 0.5)
            has_mask = True
            axis += k
            continue
        if kind == "array":
            idx_shape = draw(st.sampled_from(family))
            items.append(rng.integers(-n, n, size=idx_shape))
            has_array = True
        elif kind == "int":
            items.append(int(rng.integers(-n, n)))
        else:
            items.append(slice(None, None, draw(st.sampled_from([1, -1, 2]))))
        axis += 1
    return tuple(items)


def _np_index(template, arrays):
    it = iter(arrays)
    return tuple(next(it) if isinstance(t, np.ndarray) else t for t in template)


@SETTINGS
@given(shapes(min_dims=1, max_dims=3, min_side=1), dtypes(), seeds(), layouts(), st.data(),
       st.booleans())
def test_advanced_indexing(shape, dtype, seed, layout, data, symbolic):
    rng = np.random.default_rng(seed)
    x = with_layout(random_array(rng, dtype, shape), layout)
    template = _advanced_case(data.draw, shape, rng)
    index_arrays = [t for t in template if isinstance(t, np.ndarray)]
    if symbolic:  # index arrays as run-time inputs
        compare_to_numpy(lambda v, *ix: v[_np_index(template, ix)],
                         lambda a, *ix: a[_np_index(template, ix)], [x] + index_arrays)
        check_infer_shape(lambda v, *ix: v[_np_index(template, ix)], [x] + index_arrays)
    else:  # index arrays as constants: the static shape is known more often
        compare_to_numpy(lambda v: v[template], lambda a: a[template], [x])
        out = vg.tensor("x", shape=shape, dtype=dtype)[template]
        assert all(s in (None, n) for s, n in zip(out.type.shape, x[template].shape))
        assert out.ndim == x[template].ndim


@pytest.mark.parametrize("index", [
    lambda a: (a, None, a), lambda a: (slice(None), a, None, a), lambda a: (slice(None), a, ..., a),
    lambda a: (slice(None), 0, None, a), lambda a: (0, slice(None), a), lambda a: (a, a),
    lambda a: (slice(None), a, a), lambda a: (..., a), lambda a: (a, ..., 1),
])
def test_advanced_axis_placement(index):
    x = np.arange(7 * 3 * 4 * 5.0).reshape(7, 3, 4, 5)[..., :4]
    idx = index(np.array([0, 1, 2]))
    compare_to_numpy(lambda v: v[idx], lambda a: a[idx], [x])
    assert vg.tensor("x", shape=x.shape)[idx].type.shape == x[idx].shape
    check_infer_shape(lambda v: v[idx], [x])


def _oracle_update(x, index, v, set_):
    """numpy's x[index] = v, or an unbuffered x[index] += v (each occurrence adds)."""
    out = x.copy()
    if set_:
        out[index] = v
        return out
    ids = np.arange(x.size).reshape(x.shape)[index]
    flat = out.reshape(-1)
    for i, val in zip(ids.ravel(), np.broadcast_to(v, ids.shape).ravel()):
        flat[i] += val
    return out


@SETTINGS
@given(shapes(max_dims=3), dtypes(("float32", "float64", "int32", "int64")), seeds(),
       layouts(), st.data(), st.booleans())
def test_set_inc_subtensor_basic(shape, dtype, seed, layout, data, set_):
    rng = np.random.default_rng(seed)
    x = with_layout(random_array(rng, dtype, shape), layout)
    template, values = data.draw(basic_index(shape))
    index = _fill(template, values)
    target = x[index].shape
    vshape = target[data.draw(st.integers(0, len(target))):]
    vshape = tuple(d if data.draw(st.booleans()) else 1 for d in vshape)
    v = random_array(rng, dtype, vshape)
    update = vg.set_subtensor if set_ else vg.inc_subtensor
    arrays = [x, v] + [np.asarray(s) for s in values]
    compare_to_numpy(lambda a, b, *s: update(a[_fill(template, s)], b),
                     lambda a, b, *s: _oracle_update(a, _fill(template, s), b, set_), arrays)
    check_infer_shape(lambda a, b, *s: update(a[_fill(template, s)], b), arrays)


@SETTINGS
@given(shapes(min_dims=1, max_dims=3, min_side=1), dtypes(("float32", "float64", "int64")),
       seeds(), st.data(), st.booleans())
def test_set_inc_subtensor_advanced(shape, dtype, seed, data, set_):
    rng = np.random.default_rng(seed)
    x = random_array(rng, dtype, shape)
    template = _advanced_case(data.draw, shape, rng)
    target = x[template].shape
    vshape = tuple(d if data.draw(st.booleans()) else 1
                   for d in target[data.draw(st.integers(0, len(target))):])
    v = random_array(rng, dtype, vshape)
    update = vg.set_subtensor if set_ else vg.inc_subtensor
    index_arrays = [t for t in template if isinstance(t, np.ndarray)]
    compare_to_numpy(lambda a, b, *ix: update(a[_np_index(template, ix)], b),
                     lambda a, b, *ix: _oracle_update(a, _np_index(template, ix), b, set_),
                     [x, v] + index_arrays)


def test_repeated_indices():
    x = np.zeros(4)
    idx = np.array([0, 2, 0, 0, 3])
    v = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    expected_inc = x.copy()
    np.add.at(expected_inc, idx, v)
    expected_set = x.copy()
    expected_set[idx] = v
    compare_to_numpy(lambda a, i, b: vg.inc_subtensor(a[i], b), lambda a, i, b: expected_inc,
                     [x, idx, v])
    compare_to_numpy(lambda a, i, b: vg.set_subtensor(a[i], b), lambda a, i, b: expected_set,
                     [x, idx, v])
    # 2-d, with a slice, and a weak Python scalar value
    y = np.arange(12.0).reshape(3, 4)
    rows = np.array([2, 0, 2])
    exp = y.copy()
    np.add.at(exp, (rows, slice(1, 3)), 1.0)
    compare_to_numpy(lambda a: vg.inc_subtensor(a[rows, 1:3], 1), lambda a: exp, [y])


def test_update_ops_and_props():
    x = vg.tensor("x", shape=(None, 3), dtype="float32")
    out = vg.set_subtensor(x[1:, 0], 2.5)
    assert isinstance(out.owner.op, IncSubtensor) and out.owner.op.set_instead_of_inc
    assert out.dtype == "float32" and out.type == x.type
    out = vg.inc_subtensor(x[[0, 1]], 1.0)
    match out.owner.op:
        case AdvancedIncSubtensor(idx_list, False):
            assert idx_list == ("array",)
    assert isinstance(x[[0, 1]].owner.op, AdvancedSubtensor)


def test_perform_never_modifies_inputs():
    x = vg.tensor("x", shape=(None,))
    f = vg.compile([x], [vg.inc_subtensor(x[1:], 1.0), vg.set_subtensor(x[[0]], 5.0), x[::2]],
                   mode="reference")
    a = np.arange(4.0)
    r1, r2, r3 = f(a)
    np.testing.assert_array_equal(a, np.arange(4.0))
    np.testing.assert_array_equal(r1, [0, 2, 3, 4])
    np.testing.assert_array_equal(r2, [5, 1, 2, 3])
    np.testing.assert_array_equal(r3, [0, 2])


def test_construction_errors():
    x = vg.tensor("x", shape=(2, None))
    with pytest.raises(IndexError, match=r"Subtensor.*index 2 is out of bounds.*size 2"):
        x[2]
    with pytest.raises(IndexError, match=r"Subtensor.*index -3"):
        x[-3, 1]
    with pytest.raises(IndexError, match="too many indices"):
        x[0, 0, 0]
    with pytest.raises(IndexError, match="single ellipsis"):
        x[..., 0, ...]
    with pytest.raises((IndexError, TypeError), match="getitem"):
        x[1.5]
    with pytest.raises(TypeError, match="not a 0-d integer"):
        x[vg.scalar("f", dtype="float64"):]
    with pytest.raises(ValueError, match="step cannot be zero"):
        x[::0]
    with pytest.raises(IndexError, match=r"AdvancedSubtensor.*out of bounds"):
        x[[0, 5]]
    with pytest.raises(IndexError, match=r"boolean index of shape \(3,\)"):
        x[np.array([True, False, True])]
    with pytest.raises(IndexError, match="cannot be broadcast"):
        x[[0, 1], [[0, 1, 0]]]
    with pytest.raises(TypeError, match="set_subtensor: the first argument"):
        vg.set_subtensor(x, 1.0)
    with pytest.raises(ValueError, match=r"IncSubtensor.*\(3,\).*\(2,\)"):
        vg.set_subtensor(x[:, 0], np.zeros(3))
    with pytest.raises(TypeError, match="IncSubtensor.*float64 into int32"):
        vg.inc_subtensor(vg.tensor("i", shape=(3,), dtype="int32")[0], vg.scalar("s"))


def test_run_time_errors():
    x = vg.tensor("x", shape=(None,))
    i = vg.scalar("i", dtype="int64")
    idx = vg.tensor("idx", shape=(None,), dtype="int64")
    cases = [(x[i], "Subtensor"), (x[idx], "AdvancedSubtensor"),
             (vg.set_subtensor(x[i], 1.0), "IncSubtensor"),
             (vg.inc_subtensor(x[idx], 1.0), "AdvancedIncSubtensor")]
    for out, name in cases:
        f = vg.compile([x, i, idx], out, mode="reference")
        with pytest.raises(IndexError, match=name):
            f(np.zeros(3), 3, np.array([0, 3]))
    f = vg.compile([x, idx], vg.set_subtensor(x[idx], np.ones(2)), mode="reference")
    with pytest.raises(ValueError, match="AdvancedIncSubtensor"):
        f(np.zeros(3), np.array([0, 1, 2]))


def test_symbolic_slice_with_symbolic_step():
    x = vg.tensor("x", shape=(None,))
    a, b, c = (vg.scalar(n, dtype="int64") for n in "abc")
    arr = np.arange(10.0)
    f = vg.compile([x, a, b, c], x[a:b:c], mode="reference")
    for start, stop, step in [(1, 8, 2), (8, 1, -3), (-2, -9, -1), (20, -20, -4), (0, 0, 1)]:
        np.testing.assert_array_equal(f(arr, start, stop, step), arr[start:stop:step])
        check_infer_shape(lambda v, s, e, st_: v[s:e:st_],
                          [arr, np.asarray(start), np.asarray(stop), np.asarray(step)])


# -- gradients ------------------------------------------------------------------------------------
RNG = np.random.default_rng(3)


@pytest.mark.parametrize("fn", [
    lambda v: v[1:, ::-1],
    lambda v: v[-1, None, 1:3],
    lambda v: v[..., 0],
    lambda v: v[[0, 2, 0]],
    lambda v: v[[0, 2, 2], 1:],
    lambda v: v[:, [[1, 0], [0, 0]]],
    lambda v: v[np.array([[True, False, True, False], [False, False, True, True],
                          [True, True, True, False]])],
    lambda v: vg.set_subtensor(v[1:, 0], v[:2, 3] * 3.0),
    lambda v: vg.inc_subtensor(v[:2], v[1:] ** 2),
    lambda v: vg.set_subtensor(v[[2, 0]], v[[1, 1]] * 2.0),
    lambda v: vg.inc_subtensor(v[[0, 0, 1], 2], v[0, :3]),
    lambda v: vg.inc_subtensor(v[v.shape[0] - 1], 1.0) * v,
])
def test_indexing_gradients(fn):
    verify_grad(fn, [RNG.normal(size=(3, 4))])


def test_update_gradient_wrt_value_broadcast():
    verify_grad(lambda x, v: vg.inc_subtensor(x[:, 1:3], v), [RNG.normal(size=(3, 4)),
                                                               RNG.normal(size=(1, 2))])
    verify_grad(lambda x, v: vg.set_subtensor(x[[0, 2]], v), [RNG.normal(size=(3, 4)),
                                                               RNG.normal(size=(4,))])


@pytest.mark.parametrize("shape,index", [
    ((0, 3), lambda: ([],)), ((0, 3), lambda: (np.zeros(0, bool),)),
    ((2, 0), lambda: (slice(None), [])), ((3,), lambda: (True,)), ((3,), lambda: (False,)),
    ((2, 3), lambda: (np.True_, 1)), ((3, 2), lambda: (np.zeros((3, 2), bool),)),
    ((4, 2), lambda: (np.array([3, -4, 0]), slice(None, None, -1))),
    ((2, 3, 4), lambda: (np.array(1), slice(1, None), [0, 3])),
])
def test_advanced_edge_cases(shape, index):
    x = np.arange(float(np.prod(shape))).reshape(shape)
    idx = index()
    compare_to_numpy(lambda v: v[idx], lambda a: a[idx], [x])
    check_infer_shape(lambda v: v[idx], [x])
    compare_to_numpy(lambda v: vg.inc_subtensor(v[idx], 1.0),
                     lambda a: _oracle_update(a, idx, 1.0, False), [x])


def test_list_of_symbolic_indices():
    x = vg.tensor("x", shape=(None,))
    i, j = vg.scalar("i", dtype="int64"), vg.scalar("j", dtype="int64")
    f = vg.compile([x, i, j], x[[i, j, 0]], mode="reference")
    np.testing.assert_array_equal(f(np.arange(5.0), 3, -1), [3.0, 4.0, 0.0])
