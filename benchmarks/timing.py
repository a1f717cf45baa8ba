"""Wall-clock timing: warmup, calibrated inner loops, median and min over repeats."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Timing:
    """Per-call seconds of one measured callable."""

    median: float
    min: float
    number: int                      # calls per sample
    samples: list[float] = field(default_factory=list)

    def as_dict(self) -> dict:
        """JSON-ready fields."""
        return {"median_s": self.median, "min_s": self.min, "number": self.number,
                "samples_s": self.samples}


def _sample(fn: Callable, sync: Callable, number: int) -> float:
    """Seconds per call over `number` back-to-back calls, synchronized once at the end."""
    start = time.perf_counter_ns()
    for _ in range(number):
        result = fn()
    sync(result)
    return (time.perf_counter_ns() - start) / 1e9 / number


def measure(fn: Callable, *, sync: Callable = lambda r: None, repeat: int = 7,
            warmup: int = 1, warmup_s: float = 0.1, min_total: float = 0.2,
            min_sample: float = 0.0, max_number: int = 1_000_000) -> Timing:
    """Time `fn()` after at least `warmup` calls and `warmup_s` seconds of calls: `repeat`
    samples, each of `number` calls.

    The warmup time matters when frameworks are measured one after another in one process:
    a BLAS or Eigen thread pool the previous one used keeps spinning for a while after its
    last call, and on a 2-core machine it takes a core from whatever runs next.
    `number` is chosen so that all samples together take at least `min_total` seconds and one
    sample at least `min_sample` seconds (use a few milliseconds for microsecond calls). The
    last warmup call, timed, sets `number`.
    """
    once = 0.0
    start = time.perf_counter()
    calls = 0
    while calls < max(1, warmup) or time.perf_counter() - start < warmup_s:
        once = _sample(fn, sync, 1)
        calls += 1
    number = 1
    target = max(min_total / repeat, min_sample)
    if once < target:
        number = min(max_number, max(1, int(target / max(once, 1e-9))))
    samples = [_sample(fn, sync, number) for _ in range(repeat)]
    return Timing(statistics.median(samples), min(samples), number, samples)
