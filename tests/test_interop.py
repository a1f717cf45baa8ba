"""Arrays of other libraries on the CPU: DLPack and the array interface are taken without a
copy where dtype and layout fit (converted otherwise), read-only ones included, and never
modified."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import verglas as vg

SHAPE = (500, 400)  # 1.6 MB of float64: a copy shows in tracemalloc's peak


class DLPackOnly:
    """Exports a numpy array through DLPack alone: converting it any other way fails."""

    def __init__(self, array):
        self.array = array
        self.exports = 0

    def __dlpack__(self, **kwargs):
        self.exports += 1
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()

    def __array__(self, *args, **kwargs):
        raise AssertionError("converted through __array__, not DLPack")


class InterfaceOnly:
    """Exports a numpy array through the array interface alone."""

    def __init__(self, array):
        self.__array_interface__ = array.__array_interface__
        self.array = array


class RefusesDLPack:
    """Has __dlpack__ but cannot export (as a device numpy cannot read): __array__ serves."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, **kwargs):
        raise BufferError("not on this device")

    def __array__(self, dtype=None, copy=None):
        return self.array


@pytest.fixture(scope="module")
def f():
    x = vg.tensor("x", shape=(None, None), dtype="float64")
    # exp(x) * 2 + 1 may be computed in place: into a fresh buffer, never into x
    return vg.compile([x], [vg.sum(x), vg.exp(x) * 2.0 + 1.0])


@pytest.fixture(scope="module")
def value():
    return np.random.default_rng(0).standard_normal(SHAPE)


def expected(a):
    return [np.sum(a), np.exp(a) * 2.0 + 1.0]


def peak_bytes(fn, arg) -> int:
    """The most memory numpy (and Python) held during `fn(arg)`, beyond what it returns."""
    tracemalloc.start()
    try:
        fn(arg)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def check(f, arg, array, copied: bool):
    """`f(arg)` is right, leaves `array` (what `arg` exports) as it was, and copies it or not."""
    before = array.copy()
    for got, want in zip(f(arg), expected(before.astype("float64"))):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    np.testing.assert_array_equal(array, before)
    # (an output still held keeps its block from the calls measured: both sides then allocate)
    del got, want
    plain = np.ascontiguousarray(before, dtype="float64")
    for _ in range(2):  # (and the Function's two sets of blocks made: runtime.OutputBlocks)
        f(plain)
    extra = peak_bytes(f, arg) - peak_bytes(f, plain)
    if copied:
        assert extra >= array.nbytes // 2, extra
    else:
        assert extra < array.nbytes // 2, extra


def test_dlpack_without_a_copy(f, value):
    arg = DLPackOnly(value.copy())
    check(f, arg, arg.array, copied=False)
    assert arg.exports >= 1
    # layout or dtype that do not fit: converted (what shows a copy is seen)
    fortran = DLPackOnly(np.asfortranarray(value))
    check(f, fortran, fortran.array, copied=True)
    single = DLPackOnly(value.astype("float32"))
    check(f, single, single.array, copied=True)


def test_array_interface_without_a_copy(f, value):
    arg = InterfaceOnly(value.copy())
    check(f, arg, arg.array, copied=False)


def test_a_failed_dlpack_export_falls_back_to_array(f, value):
    arg = RefusesDLPack(value.copy())
    check(f, arg, arg.array, copied=False)


def test_read_only_arrays_without_a_copy_and_unchanged(f, value):
    ro = value.copy()
    ro.setflags(write=False)
    check(f, ro, ro, copied=False)
    check(f, DLPackOnly(ro), ro, copied=False)  # (exported read-only, DLPack 1.0)
    assert not ro.flags.writeable
    small = np.arange(6.0).reshape(2, 3)  # small read-only inputs are copied: cheaper
    small.setflags(write=False)
    for got, want in zip(f(small), expected(small)):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    assert len(f._runner.jitted.overloads) == 1  # never compiled for read-only arrays


def test_jax_arrays(f, value):
    jnp = pytest.importorskip("jax.numpy")
    import jax

    arg = jax.device_put(jnp.asarray(value.astype("float32")))  # (x64 off: float32)
    host = np.asarray(arg)
    assert not host.flags.writeable  # jax arrays are read-only
    x = vg.tensor("x", shape=(None, None), dtype="float32")
    g = vg.compile([x], vg.sum(x, axis=1) * 2.0)
    np.testing.assert_allclose(g(arg), host.sum(axis=1) * 2.0, rtol=1e-5)
    extra = peak_bytes(g, arg) - peak_bytes(g, host.copy())
    assert extra < host.nbytes // 2, extra
    np.testing.assert_array_equal(np.asarray(arg), value.astype("float32"))
    check(f, arg, host, copied=True)  # float32 into a float64 input: converted


def test_torch_tensors(f, value):
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(value.copy())
    check(f, t, t.numpy(), copied=False)
    check(f, t.T, t.T.numpy(), copied=True)  # (transposed: strided, converted)


def test_read_only_inputs_viewed_are_never_written():
    # programs whose inplace rewrites would overwrite an input they were allowed to: the
    # viewed read-only memory must come back unchanged
    x = vg.tensor("x", shape=(None,), dtype="float64")
    s = vg.tensor("s", shape=(None,), dtype="float64")
    steps = vg.scan(lambda prev: prev * 0.5 + 1.0, outputs_info=s, n_steps=3)
    g = vg.compile([x, s], [vg.set_subtensor(x[1:], vg.exp(x[:-1])) * 2.0,
                            vg.inc_subtensor(x[::2], 1.0), x + 1.0, steps[-1]])
    xv, sv = np.linspace(-1, 1, 20_000), np.linspace(0, 1, 10_000)
    expected = g(xv.copy(), sv.copy())
    for a in (xv, sv):
        a.setflags(write=False)
    for got, want in zip(g(xv, sv), expected):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(xv, np.linspace(-1, 1, 20_000))
    np.testing.assert_array_equal(sv, np.linspace(0, 1, 10_000))
