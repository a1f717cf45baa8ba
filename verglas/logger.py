"""The "verglas" logger: each compile's stages and cache outcome, and where its records go.

A compile logs one INFO line (its total time and what the cache did) and one DEBUG line per
stage; calling a Function logs nothing. verglas attaches only a NullHandler, so the records go
where the application's logging sends them; `config.log` (VERGLAS_LOG=debug|info|warning|error)
also prints them on stderr, through one handler of verglas's own, attached at the first compile
(or `python -m verglas` command) that sees the switch set.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time

from verglas.config import config

__all__ = ["logger", "apply_config", "CompileLog"]

logger = logging.getLogger("verglas")
logger.addHandler(logging.NullHandler())

_handler: logging.Handler | None = None  # the stderr handler config.log attached


def apply_config() -> None:
    """Make the stderr handler match `config.log`: attached once at its level, removed (and the
    logger's level given back) when the switch is unset; a logger left alone otherwise."""
    global _handler
    level = config.log
    if level is None:
        if _handler is not None:
            logger.removeHandler(_handler)
            logger.setLevel(logging.NOTSET)
            _handler = None
        return
    number = logging.getLevelName(level.upper())
    if _handler is None:
        _handler = logging.StreamHandler(sys.stderr)
        _handler.setFormatter(logging.Formatter("verglas %(levelname)s: %(message)s"))
        logger.addHandler(_handler)
    if _handler.level != number:
        _handler.setLevel(number)
        logger.setLevel(number)


class CompileLog:
    """Times one compile's stages (DEBUG: one line each, nested stages excluded from their
    parent's time) and reports its total and cache outcome (INFO: one line)."""

    def __init__(self, label: str):
        self.label = label
        self.start = time.perf_counter()
        self.stages: list[tuple[str, float]] = []
        self._children = [0.0]  # per open stage: the time spent in stages nested in it
        self.finished = False

    @contextlib.contextmanager
    def stage(self, name: str):
        """Time the block as stage `name` (the block may rename it: `as s: s.name = ...`)."""
        start = time.perf_counter()
        self._children.append(0.0)
        stage = _Stage(name)
        try:
            yield stage
        finally:
            total = time.perf_counter() - start
            own = total - self._children.pop()
            self._children[-1] += total
            self.stages.append((stage.name, own))
            logger.debug("%s: %s %.1f ms", self.label, stage.name, own * 1e3)

    def done(self, outcome: str) -> None:
        """Log the compile's total and its cache outcome (`outcome`)."""
        self.finished = True
        if logger.isEnabledFor(logging.INFO):
            total = time.perf_counter() - self.start
            logger.info("%s: compiled in %.3f s, cache %s", self.label, total, outcome)


class _Stage:
    """The stage a `CompileLog.stage` block times (its name, which the block may change)."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name
