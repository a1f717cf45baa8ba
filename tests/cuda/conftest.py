"""CUDA backend tests.

- `tests/cuda/test_*.py` run in the main test process: code generation and, when numba-cuda and
  NVVM are installed, a PTX compile check of every kernel kind (compile_ptx does not work
  under the simulator).
- `tests/cuda/sim/` runs the backend under numba's CUDA simulator. The simulator is chosen when
  numba.cuda is first imported (per process), so those tests need their own process:
  `NUMBA_ENABLE_CUDASIM=1 python -m pytest tests/cuda/sim` (or `python tests/cuda/run_sim.py`).
  Anywhere else they are not collected.
"""

import os
import sys


def simulator_active() -> bool:
    """Whether numba.cuda is (or will be, when first imported) the simulator."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        return False
    if "numba.cuda" in sys.modules:
        from numba.cuda.core import config

        return bool(config.ENABLE_CUDASIM)
    return True


collect_ignore = [] if simulator_active() else ["sim"]
