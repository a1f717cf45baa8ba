"""How a rewrite run reports: fire traces, the per-rewrite profile, and rewrite failures.

Tracing is opt-in: `rewrite_graph(..., trace=True)` or `verglas.config.trace_rewrites = True`
(`VERGLAS_TRACE_REWRITES=1`) prints one line per fire, `trace="profile"` (or the switch set to
"profile") prints a time / fire table at the end. A rewrite that raises or returns something
malformed is a bug in the rewrite: under `strict=True` (or `config.strict_rewrites`,
`VERGLAS_STRICT_REWRITES=1`, which the test suite sets) it fails the compile, otherwise it is
reported with `warnings.warn` and skipped.
"""

from __future__ import annotations

import sys
import time
import warnings

from verglas.config import config

__all__ = ["RewriteCycleError", "RewriteError", "RewriteProfile", "RewriteWarning", "Tracer"]


class RewriteError(Exception):
    """A rewrite raised, or returned replacements that do not fit the node it rewrote."""


class RewriteCycleError(RewriteError):
    """An equilibrium did not reach a fixed point: some rewrites kept firing (or undoing each
    other). `counts` maps rewrite name -> fires; `pair` names two rewrites that undo each other
    (the same name twice for one that undoes itself), or is None."""

    def __init__(self, message: str, counts: dict, pair: tuple[str, str] | None):
        super().__init__(message)
        self.counts = counts
        self.pair = pair


class RewriteWarning(UserWarning):
    """A non-strict run skipped a failing rewrite or stopped an equilibrium early."""


class RewriteProfile:
    """Per-rewrite calls, fires and seconds, and seconds per phase; prints as a table."""

    def __init__(self):
        self.rewrites: dict[str, list] = {}  # name -> [calls, fires, seconds]
        self.phases: dict[str, float] = {}

    def call(self, rewriter, fgraph, node):
        """Call a node rewriter, timing it."""
        t0 = time.perf_counter()
        try:
            return rewriter.fn(fgraph, node)
        finally:
            row = self._row(rewriter.name)
            row[0] += 1
            row[2] += time.perf_counter() - t0

    def _row(self, name: str) -> list:
        row = self.rewrites.get(name)
        if row is None:
            row = self.rewrites[name] = [0, 0, 0.0]
        return row

    def record(self, name: str, seconds: float, fired: bool) -> None:
        """Account one call of a graph rewriter."""
        row = self._row(name)
        row[0] += 1
        row[1] += fired
        row[2] += seconds

    def fired(self, name: str) -> None:
        self._row(name)[1] += 1

    def phase(self, name: str, seconds: float) -> None:
        self.phases[name] = self.phases.get(name, 0.0) + seconds

    def __str__(self):
        lines = [f"{'rewrite':<36} {'calls':>8} {'fires':>7} {'ms':>9}"]
        for name, (calls, fires, secs) in sorted(self.rewrites.items(), key=lambda kv: -kv[1][2]):
            lines.append(f"{name:<36} {calls:>8} {fires:>7} {secs * 1e3:>9.3f}")
        if self.phases:
            lines.append(f"{'phase':<36} {'':>8} {'':>7} {'ms':>9}")
            for name, secs in self.phases.items():
                lines.append(f"{name:<36} {'':>8} {'':>7} {secs * 1e3:>9.3f}")
            lines.append(f"{'total':<36} {'':>8} {'':>7} {sum(self.phases.values()) * 1e3:>9.3f}")
        return "\n".join(lines)


class Tracer:
    """What one rewrite run reports: `echo` prints fires, `profile` collects timings, `strict`
    turns rewrite failures into errors. `phase` is the pipeline phase running now."""

    def __init__(self, echo: bool = False, profile: RewriteProfile | None = None,
                 strict: bool = False, file=None):
        self.echo = echo
        self.profile = profile
        self.strict = strict
        self.file = file
        self.phase: str | None = None
        self.mode = None  # the Mode whose pipeline runs (inner graphs are rewritten with it)

    @classmethod
    def from_options(cls, trace=None, strict: bool | None = None) -> Tracer:
        """A tracer from `rewrite_graph` options; None falls back on `verglas.config`
        (`trace_rewrites`, `strict_rewrites`: VERGLAS_TRACE_REWRITES, VERGLAS_STRICT_REWRITES).

        `trace`: False/True (print fires), "profile" (collect and print a profile) or a
        RewriteProfile to collect into.
        """
        if trace is None:
            trace = config.trace_rewrites
        if strict is None:
            strict = config.strict_rewrites
        if isinstance(trace, RewriteProfile):
            return cls(profile=trace, strict=strict)
        if trace == "profile":
            return cls(profile=RewriteProfile(), strict=strict)
        if trace not in (True, False):
            raise ValueError(f"trace must be None, a bool, 'profile' or a RewriteProfile, "
                             f"not {trace!r}")
        return cls(echo=trace, strict=strict)

    def _print(self, text: str) -> None:
        prefix = f"[{self.phase}] " if self.phase else ""
        print(prefix + text, file=self.file or sys.stdout)

    def fired(self, name: str, node, new) -> None:
        """Print one line: the rewrite, the node before, its replacements after."""
        self._print(f"{name}: {format_node(node)} -> {', '.join(format_var(v) for v in new)}")

    def graph_fired(self, name: str, changes: int) -> None:
        self._print(f"{name}: {changes} input{'s' if changes != 1 else ''} changed")

    def failed(self, name: str, node, exc: BaseException) -> None:
        """A rewrite failed on `node` (None for a graph rewriter): raise when strict, else warn."""
        where = "" if node is None else f" on {format_node(node)}"
        message = f"rewrite {name!r} failed{where}: {type(exc).__name__}: {exc}"
        if self.strict:
            raise RewriteError(message) from exc
        warnings.warn(message, RewriteWarning, stacklevel=4)

    def no_fixed_point(self, message: str, counts: dict, pair) -> None:
        if self.strict:
            raise RewriteCycleError(message, counts, pair)
        warnings.warn(message, RewriteWarning, stacklevel=4)


def format_node(node) -> str:
    """`op(input, ...)` on one line."""
    return f"{node.op}({', '.join(repr(v) for v in node.inputs)})"


def format_var(var) -> str:
    """A named or root variable by its repr; an unnamed computed one as the node computing it."""
    owner = var.owner
    if owner is None or var.name is not None:
        return repr(var)
    text = format_node(owner)
    return text if len(owner.outputs) == 1 else f"{text}.{var.index}"
