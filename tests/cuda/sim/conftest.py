"""Simulator tests: this directory is collected only when NUMBA_ENABLE_CUDASIM=1 was set before
numba.cuda was imported (see tests/cuda/conftest.py)."""

import os

assert os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
