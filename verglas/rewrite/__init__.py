"""Graph rewriting: the engine, the registry and modes, THE pipeline, and tracing."""

from verglas.rewrite.engine import (IN_TO_OUT, OUT_TO_IN, EquilibriumRewriter, FunctionRewriter,
                                    GraphRewriter, NodeRewriter, RewriteRun, SequenceRewriter,
                                    WalkingRewriter, graph_rewriter, in_to_out, merge,
                                    node_rewriter, out_to_in)
from verglas.rewrite.pipeline import PHASES, Phase, build_pipeline, optimize, rewrite_graph
from verglas.rewrite.registry import MODES, REWRITES, Entry, Mode, Registry, get_mode, register
from verglas.rewrite.trace import (RewriteCycleError, RewriteError, RewriteProfile,
                                   RewriteWarning, Tracer)

__all__ = [
    "IN_TO_OUT", "MODES", "OUT_TO_IN", "PHASES", "REWRITES", "Entry", "EquilibriumRewriter",
    "FunctionRewriter", "GraphRewriter", "Mode", "NodeRewriter", "Phase", "Registry",
    "RewriteCycleError", "RewriteError", "RewriteProfile", "RewriteRun", "RewriteWarning",
    "SequenceRewriter", "Tracer", "WalkingRewriter", "build_pipeline", "get_mode",
    "graph_rewriter", "in_to_out", "merge", "node_rewriter", "optimize", "out_to_in", "register",
    "rewrite_graph",
]

# Theme modules: their rules register into REWRITES on import.
from verglas.rewrite import constant_folding, canonicalize, lengths, shape, specialize  # noqa: E402, F401, I001
from verglas.rewrite import fusion  # noqa: E402, F401
from verglas.rewrite import kernel_sharing  # noqa: E402, F401  (after fusion: same phase)
from verglas.rewrite import inplace  # noqa: E402, F401
from verglas.rewrite import inner_graphs  # noqa: E402, F401
from verglas.rewrite import scan  # noqa: E402, F401
from verglas.rewrite import scan_loops  # noqa: E402, F401
