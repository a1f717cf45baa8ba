"""Scan: loops over a frozen inner graph (the op, the user function `scan`, its gradient)."""

from verglas.ops.scan.basic import scan
from verglas.ops.scan.build import scan_buffers, until
from verglas.ops.scan.grad import without_unused_outputs
from verglas.ops.scan.op import Scan, ScanLayout

__all__ = ["Scan", "ScanLayout", "scan", "scan_buffers", "until", "without_unused_outputs"]
