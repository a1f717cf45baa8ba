"""Scan rewrites (phase "scan"), one job each.

`scan_remove_unused`: one reachability rewrite. The outer outputs nobody reads are dropped,
with every state, sequence slice and non-sequence the remaining outputs do not reach; states
that a kept output reads (through its taps) stay. `Scan.restrict` computes the smaller op
from the op's stored connection pattern, so the rewrite itself only moves the node's uses.

`scan_save_mem`: outputs read only at their last entries hold only those (layout `keep`).
"""

from __future__ import annotations

import time

from verglas.graph.basic import Constant
from verglas.graph.fg import OUTPUT
from verglas.ops.indexing import Subtensor
from verglas.ops.scan import Scan
from verglas.rewrite.engine import GraphRewriter, node_rewriter
from verglas.rewrite.registry import register
from verglas.rewrite.utils import restrict_to_read_outputs

__all__ = ["ScanRewriter", "reads_last_only", "scan_remove_unused", "scan_save_mem",
           "tail_read"]


@register(phase="scan", tags=("fast_run", "fast_compile"))
@node_rewriter(Scan)
def scan_remove_unused(fgraph, node):
    """Scan -> a Scan without the outputs nobody reads and the inputs they alone needed."""
    return restrict_to_read_outputs(fgraph, node)


# -- scan_save_mem ---------------------------------------------------------------------------------
def _constant_int(var) -> int | None:
    return int(var.data) if isinstance(var, Constant) and var.ndim == 0 else None


def tail_read(fgraph, var) -> int | None:
    """How many trailing entries (along axis 0) of `var` its clients read, or None when one
    may read any entry: a client reads `var[-j]`, `var[-j:]` (j > 0, constant), or `var[s:]`
    (s >= 0, constant) whose own clients read its trailing i entries (then s + i here)."""
    need = 0
    for client, i in fgraph.clients.get(var, ()):
        if client == OUTPUT or not isinstance(client.op, Subtensor) or i != 0:
            return None
        entry, values = client.op.idx_list[0], client.inputs[1:]
        if entry == "int":
            k = _constant_int(values[0])
            if k is None or k >= 0:
                return None
            need = max(need, -k)
        elif isinstance(entry, tuple) and entry[0] == "slice" and entry[1] and not entry[2]:
            start = _constant_int(values[0])
            step = _constant_int(values[1]) if entry[3] else 1
            if start is None or step != 1:
                return None
            if start < 0:
                need = max(need, -start)
                continue
            rest = tail_read(fgraph, client.outputs[0])
            if rest is None:
                return None
            need = max(need, start + rest)
        else:
            return None
    return need


def reads_last_only(fgraph, var) -> bool:
    """Whether the clients of `var` read its last entry (along axis 0) and no other: `var[-1]`,
    or a slice `var[s:]` whose clients read its last entry only."""
    for client, i in fgraph.clients.get(var, ()):
        if client == OUTPUT or not isinstance(client.op, Subtensor) or i != 0:
            return False
        entry, values = client.op.idx_list[0], client.inputs[1:]
        if entry == "int":
            if _constant_int(values[0]) != -1:
                return False
        elif isinstance(entry, tuple) and entry[0] == "slice" and entry[1] and not entry[2]:
            step = _constant_int(values[1]) if entry[3] else 1
            if (_constant_int(values[0]) is None or step != 1
                    or not reads_last_only(fgraph, client.outputs[0])):
                return False
        else:
            return False
    return True


class ScanRewriter(GraphRewriter):
    """A graph rewrite of Scan nodes: `rewrite(fgraph, node)` returns (variable, replacement)
    pairs (any variables: a save-mem rewrite replaces the node's clients) or None. Fires are
    traced and profiled under the subclass's name."""

    def rewrite(self, fgraph, node) -> list | None:
        raise NotImplementedError

    def apply(self, fgraph, run):
        tracer = run.tracer
        t0 = time.perf_counter()
        fired = False
        for node in fgraph.toposort():
            if not isinstance(node.op, Scan) or node not in fgraph.apply_nodes:
                continue
            pairs = self.rewrite(fgraph, node)
            if not pairs:
                continue
            fgraph.replace_all(pairs, reason=self.name)
            fired = True
            if tracer.echo:
                tracer.fired(self.name, node, [new for _, new in pairs])
        if tracer.profile is not None:
            tracer.profile.record(self.name, time.perf_counter() - t0, fired)


class ScanSaveMem(ScanRewriter):
    """Scan outputs whose clients read only their last entries hold only those entries
    (PyTensor's scan_save_mem): Scan layout `keep`; the loop then keeps a ring of those
    entries (and the rows its taps read), so `vg.scan(...)[-1]` allocates no trace and a
    gradient's accumulators keep none."""

    name = "scan_save_mem"

    def rewrite(self, fgraph, node):
        lay = node.op.layout
        keep = []
        for o, out in enumerate(node.outputs):
            need, full, current = tail_read(fgraph, out), out.type.shape[0], lay.kept(o)
            if lay.backwards and o >= lay.n_states:
                need = None  # (a backwards loop writes a nit-sot's last rows first)
            if need is None or (full is not None and need >= full):
                need = current
            elif current is not None:
                need = min(need, current)
            keep.append(max(need, 1) if need is not None else None)
        for _ in node.outputs:  # (again without the outputs whose clients' types would change)
            if tuple(keep) == (lay.keep or (None,) * len(node.outputs)):
                return None
            new = node.op.replace(layout=lay._replace(keep=tuple(keep))).make_node(*node.inputs)
            pairs, failed = [], False
            for o, (old, out) in enumerate(zip(node.outputs, new.outputs)):
                if keep[o] == lay.kept(o):
                    pairs.append((old, out))
                    continue
                for client, _ in list(fgraph.clients[old]):  # each reads only the last entries
                    before = client.outputs[0]
                    after = client.op.make_node(out, *client.inputs[1:]).outputs[0]
                    if not (before.type == after.type or before.type.is_super(after.type)):
                        # (a static length of x[s:] that x[-m:][s:] does not have)
                        keep[o], failed = lay.kept(o), True
                        break
                    pairs.append((before, after))
            if not failed:
                return pairs
        return None


scan_save_mem = register(ScanSaveMem(), phase="scan", tags=("fast_run", "fast_compile"))
