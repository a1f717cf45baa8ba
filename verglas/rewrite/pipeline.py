"""THE rewrite pipeline: the phases a graph goes through, in order, before compile freezes it.

Each phase runs the rules registered for it (see registry.py) that the mode selects:
an "equilibrium" phase repeats merge, its graph rules and an in-to-out walk of its node rules
until nothing fires; a "once" phase runs its graph rules in order then one in-to-out walk of
its node rules. A phase with no selected rules does nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from verglas.graph import FunctionGraph
from verglas.rewrite.engine import (
    EquilibriumRewriter,
    GraphRewriter,
    NodeRewriter,
    SequenceRewriter,
    WalkingRewriter,
    merge,
)
from verglas.rewrite.registry import REWRITES, Mode, Registry, get_mode, register
from verglas.rewrite.trace import RewriteProfile, Tracer

__all__ = ["PHASES", "Phase", "build_pipeline", "optimize", "rewrite_graph"]


@dataclass(frozen=True)
class Phase:
    """A named step of the pipeline and how its rules run ("once" or "equilibrium")."""

    name: str
    kind: str


PHASES: tuple[Phase, ...] = (
    Phase("merge", "once"),                   # CSE: equal constants, identical nodes become one
    Phase("constant_folding", "equilibrium"),  # nodes whose inputs are all constants, computed
    Phase("canonicalize", "equilibrium"),     # algebra to one normal form: x*1 -> x, --x -> x
    Phase("shape", "equilibrium"),            # shapes from input shapes; no-op reshapes dropped
    Phase("specialize", "equilibrium"),       # cheaper special cases: x**2 -> x*x
    Phase("optimize_inner_graphs", "once"),   # each inner graph once with this mode: new ops
    Phase("scan", "equilibrium"),             # loop rewrites on those bodies: unused outputs,
    #                                           invariants and products pushed out, last kept
    Phase("fusion", "once"),                  # elementwise chains into one Composite
    Phase("inplace", "once"),                 # outputs overwrite dead inputs, destroy-validated
    #                                           (inner graphs too, baked into new ops)
)  # then compile() freezes the graph

register(merge, phase="merge", tags=("fast_run", "fast_compile"))


class PhaseRewriter(GraphRewriter):
    """Runs one phase's rewriter with the phase named in traces and timed in profiles."""

    def __init__(self, phase: Phase, rewriter: GraphRewriter | None, entries: tuple[str, ...]):
        self.phase = phase
        self.name = phase.name
        self.rewriter = rewriter
        self.entries = entries

    def apply(self, fgraph, run):
        if self.rewriter is None:
            return
        tracer = run.tracer
        outer, tracer.phase = tracer.phase, self.name
        t0 = time.perf_counter()
        try:
            self.rewriter.apply(fgraph, run)
        finally:
            tracer.phase = outer
            if tracer.profile is not None:
                tracer.profile.phase(self.name, time.perf_counter() - t0)

    def __repr__(self):
        return f"{self.name} ({self.phase.kind}): {', '.join(self.entries) or '-'}"


class Pipeline(SequenceRewriter):
    """The phases of PHASES built for one mode; prints one line per phase."""

    def __str__(self):
        return "\n".join(repr(p) for p in self.rewriters)


def build_pipeline(mode: str | Mode = "fast_run", registry: Registry = REWRITES) -> Pipeline:
    """The pipeline for `mode`: one PhaseRewriter per phase of PHASES (cached per mode)."""
    mode = get_mode(mode)
    built = registry.cache.get(mode)
    if built is not None:
        return built
    known = {p.name for p in PHASES}
    for entry in registry:
        if entry.phase not in known:
            raise ValueError(f"rewrite {entry.name!r} is registered into unknown phase "
                             f"{entry.phase!r}; the phases are {[p.name for p in PHASES]}")
    with_merge = [e.rewriter for e in registry.query(mode, "merge") if e.name == "merge"]
    phases = []
    for phase in PHASES:
        entries = registry.query(mode, phase.name)
        nodes = [e.rewriter for e in entries if isinstance(e.rewriter, NodeRewriter)]
        graphs = [e.rewriter for e in entries if not isinstance(e.rewriter, NodeRewriter)]
        rewriter = None
        if phase.kind == "equilibrium" and nodes + graphs:
            rewriter = EquilibriumRewriter(nodes, with_merge + graphs, name=phase.name)
        elif phase.kind == "once" and nodes + graphs:
            walk = [WalkingRewriter(nodes, name=phase.name)] if nodes else []
            rewriter = SequenceRewriter(graphs + walk, name=phase.name)
        elif phase.kind not in ("equilibrium", "once"):
            raise ValueError(f"phase {phase.name!r}: unknown kind {phase.kind!r}")
        phases.append(PhaseRewriter(phase, rewriter, tuple(e.name for e in entries)))
    built = registry.cache[mode] = Pipeline(phases, name=f"pipeline[{mode!r}]")
    return built


def rewrite_graph(fgraph: FunctionGraph, mode: str | Mode = "fast_run", trace=None,
                  strict: bool | None = None, registry: Registry = REWRITES) -> FunctionGraph:
    """Run the pipeline of `mode` on `fgraph` in place and return it.

    `trace`: True prints every fire, "profile" prints a time/fire table at the end, a
    RewriteProfile collects into it; None reads VERGLAS_TRACE_REWRITES. `strict` (default:
    VERGLAS_STRICT_REWRITES) makes a failing rewrite fail the call instead of warning.
    """
    tracer = Tracer.from_options(trace, strict)
    tracer.mode = get_mode(mode)
    build_pipeline(mode, registry)(fgraph, tracer)
    if tracer.profile is not None and not isinstance(trace, RewriteProfile):
        print(tracer.profile)
    return fgraph


def optimize(inputs, outputs, mode: str | Mode = "fast_run", trace=None,
             strict: bool | None = None):
    """Rewrite a copy of the graph from `inputs` to `outputs` and freeze it."""
    fgraph = FunctionGraph(inputs, outputs, clone=True)
    return rewrite_graph(fgraph, mode, trace, strict).freeze()
