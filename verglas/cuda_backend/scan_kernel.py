"""A Scan whose body is elementwise over its states as ONE kernel: each thread carries its
elements of the states through every step in registers (`scan_scalar`, elementwise
recurrences), instead of a launch per step from the host.

Eligible: sit-sot states (tap -1) of one shape, sequences read at offset 0, no stopping
condition; a body of Elemwise nodes (and DimShuffles that only broadcast a 0-d value) over
the step's inputs and 0-d constants. Each inner input is either per element (the state's
rank: its element i) or one value per step or per call (0-d: broadcast). The host checks
the shapes at run time (host.run_scan_elementwise) and runs the general loop where they
differ.
"""

from __future__ import annotations

import numpy as np

from verglas.cuda_backend import templates as T
from verglas.graph.basic import Constant
from verglas.ops.basic import DimShuffle
from verglas.ops.elemwise import Elemwise

__all__ = ["elementwise_scan_kernel"]


def _eligible(op) -> bool:
    lay = op.layout
    if lay.until or lay.n_mit_sot or any(offs != (0,) for offs in lay.seq_offsets):
        return False
    if not lay.n_sit_sot:
        return False
    ndims = {t.ndim for t in op.state_types}
    if len(ndims) != 1:
        return False
    rank = ndims.pop()
    inner = op.fgraph
    for var in inner.inputs:
        if var.type.ndim not in (0, rank):
            return False
    for node in inner.toposort():
        if isinstance(node.op, Elemwise):
            for var in node.inputs:
                if isinstance(var, Constant) and np.size(var.data) != 1:
                    return False
            continue
        if isinstance(node.op, DimShuffle) and node.inputs[0].type.ndim == 0:
            continue  # a 0-d value broadcast: the same scalar
        return False
    for var in inner.outputs:
        if var.type.ndim != rank or isinstance(var, Constant):
            return False
    return True


def elementwise_scan_kernel(name: str, op):
    """The KernelSpec running Scan `op` as one kernel, or None where it does not qualify.

    Parameters: per state a trace (rows, E) (all n+1 rows, or the last one only when the op
    keeps one entry), per nit-sot output (n, E), per state its initial value (E,), per
    sequence (n, E) or (n,) (0-d per step), per non-sequence (E,) or (1,) (0-d), then E and n.
    """
    if not _eligible(op):
        return None
    lay, inner = op.layout, op.fgraph
    rank = op.state_types[0].ndim
    kb = T.KernelBuilder(name)
    n_states = lay.n_states
    traces = [kb.param("tr", T.Arr(t.dtype, 2, "C")) for t in op.state_types]
    nit_types = [v.type for v in inner.outputs[n_states:lay.n_outputs]]
    nits = [kb.param("ns", T.Arr(t.dtype, 2, "C")) for t in nit_types]
    inits = [kb.param("h0", T.Arr(t.dtype, 1, "C")) for t in op.state_types]
    seq_vars = inner.inputs[:lay.n_seqs]
    state_vars = inner.inputs[lay.n_seqs:lay.n_seqs + n_states]
    non_seq_vars = inner.inputs[lay.n_seqs + n_states:]
    seqs = [kb.param("sq", T.Arr(v.type.dtype, 2 if v.type.ndim == rank and rank else 1, "C"))
            for v in seq_vars]
    non_seqs = [kb.param("nq", T.Arr(v.type.dtype, 1, "C")) for v in non_seq_vars]
    n_elems, n_steps = kb.param("ne", T.Scal("int64")), kb.param("nt", T.Scal("int64"))
    keep_all = [lay.kept(q) != 1 for q in range(n_states)]
    kb.line(f"for i in range(cuda.grid(1), {n_elems}, cuda.gridsize(1)):")
    with kb.indent():
        values = {}
        for q, (var, h0) in enumerate(zip(state_vars, inits)):
            name_q = kb.fresh("h")
            kb.line(f"{name_q} = {T.load(f'{h0}[i]', var.type.dtype)}")
            values[var] = name_q
            if keep_all[q]:
                kb.line(f"{traces[q]}[0, i] = {name_q}")
        for var, arr in zip(non_seq_vars, non_seqs):  # the same every step
            element = f"{arr}[i]" if var.type.ndim == rank and rank else f"{arr}[0]"
            values[var] = kb.fresh("c")
            kb.line(f"{values[var]} = {T.load(element, var.type.dtype)}")
        kb.line(f"for t in range({n_steps}):")
        with kb.indent():
            # the sequence and nit-sot row of step t (a backwards loop's: n - 1 - t)
            kb.line(f"r = {n_steps} - 1 - t" if lay.backwards else "r = t")
            for var, arr in zip(seq_vars, seqs):
                element = f"{arr}[r, i]" if var.type.ndim == rank and rank else f"{arr}[r]"
                values[var] = kb.fresh("x")
                kb.line(f"{values[var]} = {T.load(element, var.type.dtype)}")
            step = dict(values)
            for node in inner.toposort():
                args = [T.literal(np.asarray(v.data).reshape(()), v.type.dtype)
                        if isinstance(v, Constant) else step[v] for v in node.inputs]
                if isinstance(node.op, DimShuffle):
                    step[node.outputs[0]] = args[0]
                    continue
                results = kb.scalar_expr(node.op.scalar_op, args,
                                         [v.type.dtype for v in node.inputs],
                                         [o.type.dtype for o in node.outputs])
                step.update(zip(node.outputs, results))
            # every output of the step first (one may be a state's old value), then the states
            outs = []
            for var, dtype in zip(inner.outputs, [*(t.dtype for t in op.state_types),
                                                  *(t.dtype for t in nit_types)]):
                outs.append(kb.fresh("o"))
                kb.line(f"{outs[-1]} = {T.cast_expr(step[var], dtype)}")
            for q, var in enumerate(state_vars):
                kb.line(f"{values[var]} = {outs[q]}")
                if keep_all[q]:
                    kb.line(f"{traces[q]}[t + 1, i] = {outs[q]}")
            for k, arr in enumerate(nits):
                kb.line(f"{arr}[r, i] = {outs[n_states + k]}")
        for q in range(n_states):
            if not keep_all[q]:
                kb.line(f"{traces[q]}[0, i] = {values[state_vars[q]]}")
    return kb.spec()
