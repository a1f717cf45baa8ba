"""Test-suite settings: rewrites run strict (a failing rewrite fails the test)."""

import os

os.environ.setdefault("VERGLAS_STRICT_REWRITES", "1")
