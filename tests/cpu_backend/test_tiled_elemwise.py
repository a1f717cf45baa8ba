"""Elementwise loops that read a transposed view run in tiles of their last two axes
(cpu_backend/tiles.py): numpy's answer for 2-d and batched transposes, broadcast rows and
columns, reversed views, sizes not a multiple of the tile, one row, empty; pooled and not."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import verglas as vg
from tests.cpu_backend.utils import compile_pair, rng
from verglas.cpu_backend.tiles import TILE


@pytest.fixture(scope="module")
def program():
    x = vg.tensor("x", shape=(None, None), dtype="float32")
    y = vg.tensor("y", shape=(None, None, None), dtype="float64")
    b = vg.tensor("b", shape=(None,), dtype="float32")
    outs = [x.T * 2, x + x.T, vg.transpose(y, (0, 2, 1)) - y, x.T * b,
            vg.exp(x.T[::-1]) + b[:, None], vg.transpose(y, (2, 1, 0)) * 3]
    return [x, y, b], compile_pair([x, y, b], outs)


def test_the_loops_over_transposed_views_are_tiled(program):
    _, (fast, _) = program
    assert fast.source().count("range(0, ") >= 2 * 4 and f", {TILE}):" in fast.source()


@pytest.mark.parametrize("n,batch,m", [(700, 2, 3), (TILE + 5, 3, 2 * TILE + 1), (1, 1, 1),
                                       (0, 0, 2), (3, 4, TILE)])
def test_tiled_loops_match_numpy(program, n, batch, m):
    _, (fast, ref) = program
    g = rng(n + m)
    xv = g.normal(size=(n, n)).astype("float32")
    yv = g.normal(size=(batch, m, m))
    bv = g.normal(size=n).astype("float32")
    for got, want in zip(fast(xv, yv, bv), ref(xv, yv, bv)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)  # (exp: vmath's ulp)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise is Linux's")
def test_a_large_new_array_asks_for_huge_pages():
    """intrinsics.empty_c: madvise(MADV_HUGEPAGE) from HUGE_PAGES_FROM bytes (a fresh 64 MB
    output took 16k page faults at every call: x * 2 over 4096 x 4096 float32, 25 -> 6 ms);
    the array is whole and right whatever the kernel answers."""
    from verglas.cpu_backend.intrinsics import HUGE_PAGES_FROM
    x = vg.tensor("x", shape=(None, None), dtype="float32")
    fast, _ = compile_pair([x], [x * 3])
    ir = "".join(fast._runner.jitted.inspect_llvm().values())
    assert "@madvise(" in ir
    side = int(np.sqrt(HUGE_PAGES_FROM // 4)) + 3
    xv = rng(2).normal(size=(side, side)).astype("float32")
    np.testing.assert_array_equal(fast(xv)[0], xv * 3)
