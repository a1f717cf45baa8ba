"""Element reads folded into the loops that use them (schedule.lower.element_reads): values,
negative and multi-axis indices, row groups, and one bounds check per array and axis."""

import re

import numpy as np

import verglas as vg
from tests.cpu_backend.utils import compare_backend, expect_error


def test_element_reads_match_the_reference():
    x = vg.tensor("x", shape=(None,), dtype="float64")
    m = vg.tensor("m", shape=(None, None), dtype="float32")
    outs = [x * m[1, -1] + m[0, 0] * x[-2] + vg.sin(x + x[3]),
            vg.softmax(m * x[2], axis=1) + x[-1]]
    compare_backend([x, m], outs, [np.linspace(-1, 1, 6), np.arange(12, dtype="float32")
                                   .reshape(3, 4) / 7])


def test_an_index_out_of_bounds_is_an_index_error():
    x = vg.tensor("x", shape=(None,), dtype="float64")
    expect_error([x], [x * x[5] + x[-7]], [np.ones(6)], IndexError, "out of bounds")
    expect_error([x], [x * x[5] + x[-7]], [np.ones(5)], IndexError, "out of bounds")


def test_one_bounds_check_per_array_and_axis():
    x = vg.tensor("x", shape=(None,), dtype="float64")
    a = vg.tensor("a", shape=(None,), dtype="float64")
    acc = a[0] * vg.sin(x)
    for i in range(1, 12):
        acc = acc + a[i] * vg.sin(x + i)
    f = vg.compile([x, a], acc)
    source = f.source()
    assert source.count("raise_if_IndexError0(") == 1
    # (its length read once into a local where read again: shape_reads.py)
    assert re.search(r"in1(\.shape\[0\]|_n0) <= 11", source)
    compare_backend([x, a], [acc], [np.linspace(0, 3, 9), np.arange(12.0)])
