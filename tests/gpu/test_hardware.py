"""What only a real GPU shows: concurrent callers of one captured graph, float16 kernels
loading, host values uploaded inside a capture, new shapes and layouts after a capture.
Skipped without a GPU (see conftest.py)."""

import threading

import numpy as np
import pytest

import verglas as vg
from tests.cuda.compare import symbolic_inputs


def _program():
    x, y = symbolic_inputs([np.zeros((64, 32), "float32"), np.zeros((32,), "float32")])
    outs = [vg.softmax(x * y, axis=1), vg.sum(vg.exp(x) - y, axis=0)]
    return [x, y], outs


def test_eight_threads_calling_one_function_get_their_own_answers():
    inputs, outs = _program()
    f = vg.compile(inputs, outs, device="cuda")
    ref = vg.compile(inputs, outs, mode="reference")
    rng = np.random.default_rng(1)
    cases = [(rng.standard_normal((64, 32)).astype("float32"),
              rng.standard_normal(32).astype("float32")) for _ in range(8)]
    for a, b in cases[:3]:  # eager, capture, replay: the graph exists before the threads start
        f(a, b)
    errors = []

    def call(k):
        a, b = cases[k]
        want = ref(a, b)
        for _ in range(50):
            for g, e in zip(f(a, b), want):
                if not np.allclose(vg.asnumpy(g), e, rtol=1e-4, atol=1e-5):
                    errors.append(k)
                    return

    threads = [threading.Thread(target=call, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, f"threads {sorted(set(errors))} got another caller's answer"


def test_float16_kernels_load_and_run():
    x, y = symbolic_inputs([np.zeros((1000,), "float16"), np.zeros((1000,), "float16")])
    f = vg.compile([x, y], x * y + x, device="cuda")
    rng = np.random.default_rng(2)
    a = rng.standard_normal(1000).astype("float16")
    b = rng.standard_normal(1000).astype("float16")
    np.testing.assert_allclose(vg.asnumpy(f(a, b)), a * b + a, rtol=2e-3, atol=2e-3)


def test_shape_vector_outputs_stay_right_under_replay():
    x, = symbolic_inputs([np.zeros((7, 5), "float32")])
    f = vg.compile([x], [vg.exp(x), x.shape], device="cuda")
    rng = np.random.default_rng(3)
    for _ in range(20):
        a = rng.standard_normal((7, 5)).astype("float32")
        e, shape = f(a)
        np.testing.assert_allclose(vg.asnumpy(e), np.exp(a), rtol=1e-6)
        np.testing.assert_array_equal(vg.asnumpy(shape), [7, 5])


def test_new_shapes_and_layouts_after_a_capture():
    x, = symbolic_inputs([np.zeros((6, 4), "float64")])
    out = vg.tanh(x) * 2 + vg.sum(x, axis=1, keepdims=True)
    f = vg.compile([x], out, device="cuda")
    ref = vg.compile([x], out, mode="reference")
    rng = np.random.default_rng(4)
    for shape, view in [((6, 4), None), ((6, 4), None), ((6, 4), None), ((9, 3), None),
                        ((8, 8), np.s_[::2, ::-1]), ((6, 4), np.s_[:, ::-1]), ((1, 0), None),
                        ((6, 4), None)]:
        a = rng.standard_normal(shape)
        a = a if view is None else a[view]
        before = a.copy()
        np.testing.assert_allclose(vg.asnumpy(f(a)), ref(a), rtol=1e-12)
        np.testing.assert_array_equal(a, before)


def test_scan_and_opfromgraph_programs_match_the_reference():
    h0, u = symbolic_inputs([np.zeros((4,)), np.zeros((50, 4))])
    hs = vg.scan(lambda u_t, h: 0.5 * h + vg.tanh(u_t), sequences=[u], outputs_info=[h0])
    a, = symbolic_inputs([np.zeros((4,))])
    layer = vg.OpFromGraph([a], [vg.exp(a) * 2])
    outs = [hs, layer(layer(h0))]
    f = vg.compile([h0, u], outs, device="cuda")
    ref = vg.compile([h0, u], outs, mode="reference")
    rng = np.random.default_rng(5)
    for _ in range(3):
        args = rng.standard_normal(4), rng.standard_normal((50, 4))
        for g, e in zip(f(*args), ref(*args)):
            np.testing.assert_allclose(vg.asnumpy(g), e, rtol=1e-12)


def test_a_capture_after_a_strided_first_call():
    """The graph key is shapes and dtypes: a strided first call compiles the strided kernels,
    and the capture (second call, contiguous) needs the contiguous ones, loaded before it."""
    x, = symbolic_inputs([np.zeros((6, 4), "float32")])
    out = vg.exp(x) * 3 - x
    f = vg.compile([x], out, device="cuda")
    rng = np.random.default_rng(6)
    wide = rng.standard_normal((6, 8)).astype("float32")
    np.testing.assert_allclose(vg.asnumpy(f(wide[:, ::2])), np.exp(wide[:, ::2]) * 3
                               - wide[:, ::2], rtol=1e-6)
    for _ in range(3):
        a = rng.standard_normal((6, 4)).astype("float32")
        np.testing.assert_allclose(vg.asnumpy(f(a)), np.exp(a) * 3 - a, rtol=1e-6)
    assert len(f._runner._graphs) == 1


def test_negative_zero_arrives_as_negative_zero():
    """cupy.array of a 0-d array fills with a memset when the value == 0: -0.0 arrived as 0.0
    (fuzzer seeds 641, 1028)."""
    x, = symbolic_inputs([np.zeros((), "float64")])
    f = vg.compile([x], [x * 1.0, -vg.zeros((), "float64"), 1.5 / x], device="cuda")
    for _ in range(3):
        got = [vg.asnumpy(o) for o in f(np.array(-0.0))]
        assert np.signbit(got[0]) and np.signbit(got[1]), got
        assert got[2] == -np.inf


# the seeds the fuzzer failed on its first run on a real GPU (an H100, 2026-11-27), each fixed
@pytest.mark.parametrize("seed", [142, 198, 201, 203, 216, 252, 280, 390, 399, 469, 637, 641,
                                  953, 967, 1028, 1131, 1762, 1809, 1852, 1946])
def test_fuzzer_seeds_found_on_the_first_gpu_run(seed):
    from tests.fuzz.check import CONFIGS, check
    from tests.fuzz.generate import generate

    np.seterr(all="ignore")
    outcome = check(generate(seed, small=True), CONFIGS["cuda_gpu"])
    assert outcome.ok, (outcome.signature, outcome.detail[:2000])


def test_large_calls_are_not_replayed_as_graphs():
    """A replay copies inputs and outputs through the graph's own buffers: ew_chain on 1e8
    float32 took 1.18 ms replayed, 4x its kernel. Large signatures run eagerly; small ones
    are still captured."""
    import cupy

    x, = symbolic_inputs([np.zeros(4, "float32")])
    f = vg.compile([x], vg.exp(vg.sin(x)) * 2, device="cuda")
    runner = f._runner
    small, large = cupy.ones(1000, "float32"), cupy.ones(4 << 20, "float32")  # 16 MB each way
    for _ in range(3):
        f(small), f(large)
    assert [k[0][0] for k in runner._graphs] == [(1000,)]
    np.testing.assert_allclose(vg.asnumpy(f(large))[:3], np.exp(np.sin(1.0)) * 2, rtol=1e-6)
