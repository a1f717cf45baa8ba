"""parallel_range (cpu_backend/parallel_for.py): every row once, in a few chunks per thread."""

import numba
import numpy as np
import pytest

from verglas.cpu_backend.parallel_for import CHUNKS_PER_THREAD, SERIAL_WORK, launch, parallel_range


@numba.njit(no_cpython_wrapper=True)
def _mark(lo, hi, seen, calls):
    calls[lo] = hi - lo  # (chunks start at distinct rows)
    for i in range(lo, hi):
        seen[i] += 1


@numba.njit
def _run(n, seen, calls):
    parallel_range(_mark, n, n, (seen, calls))


@pytest.mark.parametrize("n", [0, 1, 7, SERIAL_WORK + 3, 1_000_003])
def test_every_row_runs_once_in_a_few_chunks(n):
    """numba's pool splits what it is given down to single units: a loop over 1M rows handed
    over as 1M units ran as ~690k calls of its body. It gets a few chunks per thread now."""
    launch()
    seen, calls = np.zeros(n, np.int64), np.zeros(n + 1, np.int64)
    _run(n, seen, calls)
    assert (seen == 1).all()
    chunks = int((calls > 0).sum())
    assert chunks == (n > 0) if n < SERIAL_WORK else \
        1 <= chunks <= CHUNKS_PER_THREAD * numba.get_num_threads()
