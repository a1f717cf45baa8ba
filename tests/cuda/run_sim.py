"""Run the CUDA simulator tests in their own process: `python tests/cuda/run_sim.py [pytest args]`.

numba picks the simulator when numba.cuda is first imported, so the variable must be set before
pytest (and anything it imports) starts; this sets it and runs pytest on tests/cuda/sim.
"""

import os
import subprocess
import sys
from pathlib import Path

if __name__ == "__main__":
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
    cmd = [sys.executable, "-m", "pytest", str(root / "tests" / "cuda" / "sim"), *sys.argv[1:]]
    sys.exit(subprocess.call(cmd, cwd=root, env=env))
