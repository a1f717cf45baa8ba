"""The reference backend: each op's numpy `perform`, node by node (verglas/graph/reference.py).

It is `compile(mode="reference")` whatever the device (the graph as the user wrote it: the
oracle every backend is tested against), and the device "reference" in any other mode (the
optimized graph, unlowered: how rewrites are checked against the oracle).
"""

from __future__ import annotations

import numpy as np

from verglas.backend import Backend, Runner, register
from verglas.graph.frozen import FrozenFunctionGraph
from verglas.graph.printing import dprint
from verglas.graph.reference import ReferenceRunner

__all__ = ["ReferenceBackend", "Executor"]


class ReferenceBackend(Backend):
    """Runs the frozen graph itself: no Program, no generated code, nothing cached."""

    name = "reference"
    mode = "reference"
    lowers = False

    def runner(self, code_of, key, input_types) -> Executor:
        return Executor(code_of())


class Executor(Runner):
    """A ReferenceRunner whose outputs the caller owns."""

    def __init__(self, graph: FrozenFunctionGraph):
        self.graph = graph
        self.run = ReferenceRunner(graph)

    def __call__(self, args: list) -> list:
        return _owned(self.run(args), args)

    def source(self) -> str:
        return ("# The reference executor generates no code: it runs this graph node by node,\n"
                "# each node's numpy `perform` (verglas.graph.reference.ReferenceRunner).\n\n"
                + dprint(self.graph, file="str"))


def _owned(outputs: list, inputs: list) -> list:
    """Outputs the caller owns: copies of anything aliasing an input, a constant or another
    output, and of read-only arrays."""
    result = []
    for out in outputs:
        out = np.asarray(out)
        if (not out.flags.writeable or not out.flags.owndata
                or any(np.may_share_memory(out, a) for a in inputs)
                or any(np.may_share_memory(out, o) for o in result)):
            out = out.copy()
        result.append(out)
    return result


register(ReferenceBackend())
