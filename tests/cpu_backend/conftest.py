"""CPU backend tests: compiled programs go to a fresh cache directory per session (unless
VERGLAS_CACHE_DIR is set), so a run measures cold compilation and leaves nothing behind."""

import atexit
import os
import shutil
import tempfile

if not os.environ.get("VERGLAS_CACHE_DIR"):
    _dir = tempfile.mkdtemp(prefix="verglas-cpu-tests-")
    os.environ["VERGLAS_CACHE_DIR"] = _dir
    atexit.register(shutil.rmtree, _dir, ignore_errors=True)
