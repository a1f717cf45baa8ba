"""Reductions of maps (schedule/reduce_maps.py): a reduction computing its elementwise producer
in its own loop, read from the Program, and the CPU's results for it against numpy (the CUDA
backend's under the simulator: tests/cuda/sim)."""

from __future__ import annotations

import numpy as np
import pytest

import verglas as vg
from tests.cpu_backend.utils import compare_backend, compile_pair
from tests.schedule.test_scheduler import program_of


def _fused(program) -> list[tuple[str, str]]:
    return [(type(program.steps[r].node.op).__name__, type(program.steps[p].node.op).__name__)
            for r, p in program.reduce_maps]


def test_the_sum_of_a_map_is_one_loop():
    x = vg.tensor("x", shape=(None,), dtype="float64")
    program = program_of([x], [vg.sum(vg.exp(x) * 2.0)])
    assert _fused(program) == [("Sum", "Elemwise")]
    assert program.n_kernels() == 1
    assert "(in the loop of" in str(program)


def test_a_map_read_twice_or_returned_stays_a_step():
    x = vg.tensor("x", shape=(None,), dtype="float64")
    e = vg.exp(x)
    assert not program_of([x], [vg.sum(e), e]).reduce_maps
    assert not program_of([x], [vg.sum(e) + vg.max(e)]).reduce_maps


@pytest.mark.parametrize("yshape", [(5, 3), (1, 3), (5, 1), (1, 1)])
def test_broadcasting_known_only_at_run_time(yshape):
    # the specialized variant checks the producer's lengths; a call that broadcasts runs the
    # general variant, whose loop reads the broadcast axes with a stride of 0
    x = vg.tensor("x", shape=(None, None), dtype="float64")
    y = vg.tensor("y", shape=(None, None), dtype="float64")
    out = [vg.sum(x * y, axis=0), vg.max(vg.exp(y - x))]
    program = compile_pair([x, y], out)[0].program
    assert len(program.reduce_maps) == 2
    g = np.random.default_rng(1)
    compare_backend([x, y], out, [g.standard_normal((5, 3)), g.standard_normal(yshape)])
    bad = g.standard_normal((2, 3))
    with pytest.raises(ValueError):
        compile_pair([x, y], out)[0](g.standard_normal((5, 3)), bad)


_CASES = {
    "sum_exp_1d": (lambda x, b: vg.sum(vg.exp(x)), lambda x, b: np.sum(np.exp(x))),
    "max_axis0_bcast": (lambda x, b: vg.max(x * b, axis=0),
                        lambda x, b: np.max(x * b, axis=0)),
    "sum_axis0_keepdims": (lambda x, b: vg.sum(vg.abs(x - b), axis=0, keepdims=True),
                           lambda x, b: np.sum(np.abs(x - b), axis=0, keepdims=True)),
    "min_all_scalar": (lambda x, b: vg.min(x * 3.0 - 1.0), lambda x, b: np.min(x * 3.0 - 1.0)),
    "prod_axis0": (lambda x, b: vg.prod(x * 0.5 + 1.0, axis=0),
                   lambda x, b: np.prod(x * 0.5 + 1.0, axis=0)),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", list(_CASES))
def test_fused_reductions_match_numpy(case, dtype):
    build, _ = _CASES[case]
    x = vg.tensor("x", shape=(None, 3) if case != "sum_exp_1d" else (None,), dtype=dtype)
    b = vg.tensor("b", shape=(1, 3), dtype=dtype)
    out = build(x, b)
    assert compile_pair([x, b], out)[0].program.reduce_maps, case
    g = np.random.default_rng(0)
    shape = (5, 3) if case != "sum_exp_1d" else (7,)
    xv = g.standard_normal(shape).astype(dtype)
    xv.flat[0] = -0.0
    bv = g.standard_normal((1, 3)).astype(dtype)
    compare_backend([x, b], out, [xv, bv])
    if case.startswith(("sum", "prod")):  # (max/min of nothing: an error, tested apart)
        compare_backend([x, b], out, [xv[:0], bv])
    compare_backend([x, b], out, [xv[::-1], bv])  # a negative-stride view
    nan = xv.copy()
    nan.flat[1] = np.nan
    compare_backend([x, b], out, [nan, bv])


def test_an_empty_min_of_a_map_raises():
    x = vg.tensor("x", shape=(None,), dtype="float64")
    f = vg.compile([x], vg.min(x * 2.0))
    assert f.program.reduce_maps
    with pytest.raises(ValueError, match="zero-size"):
        f(np.zeros(0))
