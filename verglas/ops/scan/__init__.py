"""Scan: loops over a frozen inner graph (the op, the user function `scan`, its gradient)."""

from verglas.ops.scan.basic import scan, scan_buffers
from verglas.ops.scan.op import Scan, ScanLayout

__all__ = ["Scan", "ScanLayout", "scan", "scan_buffers"]
