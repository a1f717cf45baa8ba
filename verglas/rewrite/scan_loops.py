"""Loop rewrites of Scan (phase "scan"), one job each, each a ScanRewriter traced by its name:

- `scan_merge`: two loops over the same sequences for the same number of steps, neither
  reading the other, become one loop computing both bodies (one pass over the sequences).
- `scan_merge_inputs`: a sequence or non-sequence given twice (the same outer variable) is
  read once: the body's two inner variables become one.
- `scan_inline_constants`: a constant non-sequence becomes a constant of the body (folded,
  specialized and fused there like any constant).
- `scan_hoist_invariants`: body values that depend on non-sequences and constants only are
  computed once, before the loop, and read as new non-sequences (`exp(W)` once, not per step).
- `scan_push_out_seqs`: body values that depend on sequences but on no state, where they hold
  a matrix product, are computed for every step at once before the loop (ops/batching.py) and
  read as new sequences: a step's `x_t @ u` becomes one `x @ u`, one BLAS call.
- `scan_push_out_outputs`: a nit-sot output computed without the states is computed after the
  loop, vectorized over the steps; one computed from the states through a matrix product
  (`W_out @ h_t`, a gradient's `da_t @ u.T`) has the loop collect the product's varying
  operand instead, and the product becomes one after the loop.
- `scan_push_out_sums`: a state that only accumulates matrix products, `s_t = s_{t-1} +
  P_t @ Q_t`, and whose last value alone is read (a weight gradient) becomes `s_0 + [P_1 ...
  P_T] @ [Q_1; ...; Q_T]` after the loop, one product, with the loop collecting P_t and Q_t
  where they depend on the states. (The output it replaces holds its last entries, of which
  its clients read the last: each entry is that sum.)
- `scan_push_in_seqs`: a sequence computed elementwise from other arrays, read by this loop
  alone and in the body by elementwise work only, is computed in the body, one row per step,
  fused there with that work: the loop reads its operands' rows, and the whole array is never
  built (an RNN gradient's `2 * hs / n` costs no (T, H) buffer). The inverse of the push-outs,
  for work that gains nothing from running over all steps at once.

The push-outs batch a step's values, so a row `h[None]` becomes a (T, 1, H) view whose axis the
product then drops: canonicalize's two DimShuffle rules also run in this phase
(`scan_dimshuffle_dimshuffle`, `scan_dimshuffle_identity`), and such pairs cancel.
"""

from __future__ import annotations

from verglas.graph.basic import Constant
from verglas.graph.traversal import ancestors, toposort
from verglas.graph.fg import OUTPUT
from verglas.ops.basic import DimShuffle, ShapeI, shape_i
from verglas.ops.batching import batch, batchable, substitute
from verglas.ops.elemwise import Elemwise, SumToShape
from verglas.ops.indexing import Subtensor, getitem
from verglas.ops.linalg import MatMul
from verglas.ops.math import add, minimum, mul
from verglas.ops.scalar import Add
from verglas.ops.shape import broadcast_to, reshape
from verglas.rewrite.canonicalize import dimshuffle_dimshuffle, dimshuffle_identity
from verglas.rewrite.registry import register
from verglas.rewrite.scan import ScanRewriter, reads_last_only
from verglas.rewrite.scan_parts import NonSeq, ScanParts, Seq
from verglas.rewrite.shape import dims_of, provably_equal
from verglas.rewrite.utils import single_client

__all__ = ["scan_merge", "scan_merge_inputs", "scan_inline_constants", "scan_hoist_invariants",
           "scan_push_out_seqs", "scan_push_out_outputs", "scan_push_out_sums",
           "scan_push_in_seqs", "scan_dimshuffle_dimshuffle", "scan_dimshuffle_identity"]

TAGS = ("fast_run",)


def _body(parts: ScanParts) -> list:
    return toposort(parts.inner_outputs(), parts.inner_inputs())


def _fits(inner_type, outer_row_type) -> bool:
    """Whether an outer value's rows can stand for an inner value of `inner_type`."""
    return inner_type == outer_row_type or inner_type.is_super(outer_row_type)


def _row_type(var):
    return var.type.clone(shape=var.type.shape[1:])


class ScanMerge(ScanRewriter):
    """See the module docstring."""

    name = "scan_merge"

    def rewrite(self, fgraph, node):
        if node.op.layout.until or not node.op.layout.n_seqs:
            return None
        seqs = set(node.inputs[1:1 + node.op.layout.n_seqs])
        for other in fgraph.toposort():
            lay = getattr(other.op, "layout", None)
            if (other is node or not isinstance(other.op, type(node.op)) or lay.until
                    or lay.backwards != node.op.layout.backwards
                    or other.inputs[0] is not node.inputs[0]
                    or set(other.inputs[1:1 + lay.n_seqs]) != seqs
                    or _reads(other, node) or _reads(node, other)):
                continue
            parts, more = ScanParts.of(node), ScanParts.of(other)
            parts.seqs += more.seqs
            parts.states += more.states
            parts.nits += more.nits
            parts.non_seqs += more.non_seqs
            return parts.build()[1]
        return None


def _reads(node, other) -> bool:
    """Whether `node` depends on an output of `other`."""
    outs = set(other.outputs)
    return any(v in outs for v in ancestors(node.inputs))


class ScanMergeInputs(ScanRewriter):
    """See the module docstring."""

    name = "scan_merge_inputs"

    def rewrite(self, fgraph, node):
        parts = ScanParts.of(node)
        replace = {}
        first_seq: dict = {}
        for seq in list(parts.seqs):
            kept = first_seq.setdefault(seq.outer, seq)
            if kept is seq:
                continue
            for o, v in zip(seq.offsets, seq.inner):
                if o in kept.offsets:
                    twin = kept.inner[kept.offsets.index(o)]
                    if twin.type != v.type:
                        return None
                    replace[v] = twin
                else:
                    kept.offsets.append(o)
                    kept.inner.append(v)
            parts.seqs.remove(seq)
        first_ns: dict = {}
        for w in list(parts.non_seqs):
            kept = first_ns.setdefault(w.outer, w)
            if kept is not w:
                if kept.inner.type != w.inner.type:
                    return None
                replace[w.inner] = kept.inner
                parts.non_seqs.remove(w)
        if len(parts.seqs) == node.op.layout.n_seqs and len(parts.non_seqs) == \
                node.op.layout.n_non_seqs:
            return None
        for seq in parts.seqs:  # (offsets in order)
            pairs = sorted(zip(seq.offsets, seq.inner), key=lambda p: p[0])
            seq.offsets, seq.inner = [o for o, _ in pairs], [v for _, v in pairs]
        if replace:
            parts.replace_inner(replace)
        return parts.build()[1]


class ScanInlineConstants(ScanRewriter):
    """See the module docstring."""

    name = "scan_inline_constants"

    def rewrite(self, fgraph, node):
        parts = ScanParts.of(node)
        constants = {w.inner: w.outer for w in parts.non_seqs if isinstance(w.outer, Constant)}
        if not constants:
            return None
        parts.non_seqs = [w for w in parts.non_seqs if w.inner not in constants]
        parts.replace_inner(constants, loose=True)
        return parts.build()[1]


class ScanHoistInvariants(ScanRewriter):
    """See the module docstring."""

    name = "scan_hoist_invariants"

    def rewrite(self, fgraph, node):
        parts = ScanParts.of(node)
        nodes = _body(parts)
        invariant = {w.inner for w in parts.non_seqs}
        for n in nodes:
            if all(i in invariant or isinstance(i, Constant) for i in n.inputs):
                invariant.update(n.outputs)
        work = _with_work(nodes, invariant)
        frontier = []
        for n in nodes:
            if n.outputs[0] in invariant:
                continue
            frontier += [i for i in n.inputs if i in work and i not in frontier]
        frontier += [o for o in parts.inner_outputs() if o in work and o not in frontier]
        if not frontier:
            return None
        outer = substitute(frontier, parts.outer_of())
        parts.replace_inner({v: parts.add_non_sequence(o, like=v)
                             for v, o in zip(frontier, outer)})
        return parts.build()[1]


def _runs_work(node) -> bool:
    """Whether `node` computes arrays: not a shape read, a view or a few scalars (hoisting
    those saves nothing and hides the body's shapes from its rewrites)."""
    op = node.op
    return not (op.reads_shape_only or op.runs_inline or op.view_map
                or (isinstance(op, Elemwise) and all(o.ndim == 0 for o in node.outputs)))


def _with_work(nodes, among: set) -> set:
    """The values of `among` whose computation (within `among`) runs work on arrays."""
    found: set = set()
    for n in nodes:
        if n.outputs[0] in among and (_runs_work(n) or any(i in found for i in n.inputs)):
            found.update(n.outputs)
    return found


def _loop_values(parts: ScanParts) -> tuple[list, set, set]:
    """(the body's nodes in order, the values depending on a state, those depending on a
    sequence and on no state): what the push-out rewrites start from."""
    nodes = _body(parts)
    states = parts.state_dependent()
    return nodes, states, _sequence_free(parts, nodes, states)


def _sequence_free(parts: ScanParts, nodes, states: set) -> set:
    """The body values that depend on a sequence and on no state (the sequences' own)."""
    free = set(parts.sequence_windows())
    for n in nodes:
        if any(i in free for i in n.inputs) and not any(o in states for o in n.outputs):
            free.update(n.outputs)
    return free


def _with_matmul(nodes, among: set) -> set:
    """The values of `among` whose computation (within `among`) holds a matrix product."""
    heavy: set = set()
    for n in nodes:
        if n.outputs[0] in among and (isinstance(n.op, MatMul)
                                      or any(i in heavy for i in n.inputs)):
            heavy.update(n.outputs)
    return heavy


class ScanPushOutSeqs(ScanRewriter):
    """See the module docstring."""

    name = "scan_push_out_seqs"

    def rewrite(self, fgraph, node):
        if node.op.layout.until:  # (the steps it runs are known once it has run)
            return None
        parts = ScanParts.of(node)
        nodes, states, free = _loop_values(parts)
        heavy = _with_matmul(nodes, free)
        frontier = []
        for n in nodes:
            if n.outputs[0] in free:
                continue
            frontier += [i for i in n.inputs if i in heavy and i not in frontier]
        frontier += [s.out for s in parts.states if s.out in heavy and s.out not in frontier]
        batched = (batch(frontier, parts.sequence_windows(), parts.outer_of()) if frontier
                   else None)
        if batched is None:
            return None
        pairs = [(v, b) for v, b in zip(frontier, batched) if _fits(v.type, _row_type(b))]
        if not pairs:
            return None
        parts.replace_inner({v: parts.add_sequence(b, like=v) for v, b in pairs})
        return parts.build()[1]


def _cut(y, states: set, kept: set):
    """The value a nit-sot `y` computed from the states should be collected as, so that `y`
    is computed after the loop: on `y`'s one state-dependent path, the state-dependent operand
    of the first matrix product (past the DimShuffles that feed it), or None when there is
    no such product or the loop needs it anyway (it is in `kept`, what the states' new
    values are computed from)."""
    v = y
    while v.owner is not None and v in states:
        n = v.owner
        dependent = [i for i in n.inputs if i in states]
        if len(dependent) != 1 or not batchable(n) or v in kept:
            return None
        v = dependent[0]
        if isinstance(n.op, MatMul):
            cut = _factor_base(v)
            return cut if cut in states else None
    return None


def _tail(outer, keep):
    """The last `keep` entries of an output computed for every step (all: keep None)."""
    return outer if keep is None else getitem(outer, slice(-keep, None))


class ScanPushOutOutputs(ScanRewriter):
    """See the module docstring."""

    name = "scan_push_out_outputs"

    def rewrite(self, fgraph, node):
        if node.op.layout.until:
            return None
        parts = ScanParts.of(node)
        nodes, states, free = _loop_values(parts)
        kept = set(ancestors([st.out for st in parts.states], parts.inner_inputs()))
        moved = []  # (nit-sot, the value collected instead or None)
        for nit in parts.nits:
            if not fgraph.clients.get(nit.old):
                continue
            if nit.out in free:
                moved.append((nit, None))
            elif nit.out in states and (cut := _cut(nit.out, states, kept)) is not None:
                moved.append((nit, cut))
        if not moved:
            return None
        for nit, _ in moved:
            parts.nits.remove(nit)
        collected = [parts.collect(cut) for cut in dict.fromkeys(c for _, c in moved)
                     if cut is not None]
        # (before build drops the sequences and non-sequences only they read)
        windows, same = parts.sequence_windows(), parts.outer_of()
        new, pairs = parts.build()
        n_states = len(parts.states)
        outer_of = {c.out: new.outputs[n_states + parts.nits.index(c)] for c in collected}
        replace = dict(pairs)
        for nit, cut in moved:
            cuts = {cut: outer_of[cut]} if cut is not None else {}
            found = batch([nit.out], {**windows, **cuts}, same)
            if found is None or not _fits(nit.old.type, _tail(found[0], nit.keep).type):
                return None
            replace[nit.old] = _tail(found[0], nit.keep)
        return list(replace.items())


def _factor_base(v):
    """`v` past the DimShuffles and SumToShapes that feed it (a gradient's factor: the value
    two products of one loop share, `da_t` of `da_t @ u.T` and of `h_t.T @ da_t`)."""
    while v.owner is not None and isinstance(v.owner.op, (DimShuffle, SumToShape)):
        v = v.owner.inputs[0]
    return v


class ScanPushOutSums(ScanRewriter):
    """See the module docstring."""

    name = "scan_push_out_sums"

    def rewrite(self, fgraph, node):
        if node.op.layout.until:
            return None
        parts = ScanParts.of(node)
        nodes, states, free = _loop_values(parts)
        uses: dict = {}
        for n in nodes:
            for i in n.inputs:
                uses[i] = uses.get(i, 0) + 1
        for o in parts.inner_outputs():
            uses[o] = uses.get(o, 0) + 1
        for s in parts.states:
            if s.mit or s.keep is None or not reads_last_only(fgraph, s.old):
                continue
            found = self._accumulation(s, uses, states, free)
            if found is not None:
                return self._push_out(parts, s, *found, states)
        return None

    @staticmethod
    def _accumulation(s, uses, states, free):
        """(P, Q) when state `s` is s_{t-1} + P_t @ Q_t and P_t, Q_t vary with the steps
        (else None)."""
        if s.out.owner is None or uses.get(s.out) != 1:
            return None
        prev = s.inner[0]
        n = s.out.owner
        if not (isinstance(n.op, Elemwise) and isinstance(n.op.scalar_op, Add)
                and len(n.inputs) == 2 and prev in n.inputs and uses.get(prev) == 1):
            return None
        g = n.inputs[1] if n.inputs[0] is prev else n.inputs[0]
        if g.owner is None or not isinstance(g.owner.op, MatMul) or g.type != s.out.type \
                or g.ndim != 2:
            return None
        p, q = g.owner.inputs
        for factor in (p, q):
            base = _factor_base(factor)
            if prev in _ancestors_within(factor, states) or (base not in states
                                                             and base not in free):
                return None
        return p, q

    @staticmethod
    def _push_out(parts, s, p, q, states):
        # (before build drops the sequences and non-sequences only s read)
        windows, same = parts.sequence_windows(), parts.outer_of()
        parts.states.remove(s)
        bases = dict.fromkeys(_factor_base(factor) for factor in (p, q))
        collected = [parts.collect(base) for base in bases if base in states]
        new, pairs = parts.build()
        n_states = len(parts.states)
        windows.update((c.out, new.outputs[n_states + parts.nits.index(c)]) for c in collected)
        found = batch([p, q], windows, same)
        if found is None:
            return None
        p_b, q_b = found
        if p.type.shape[1] == 1:  # outer products: [P_1 ... P_T] is P's rows transposed
            left, right = DimShuffle(3, (1, 0))(p_b), DimShuffle(3, (0, 2))(q_b)
        else:
            t, m, k = (shape_i(p_b, i) for i in range(3))
            left = reshape(DimShuffle(3, (1, 0, 2))(p_b), (m, mul(t, k)))
            right = reshape(q_b, (mul(t, k), shape_i(q_b, 2)))
        total = add(s.init, MatMul()(left, right))
        # the kept entries (min(keep, steps + 1) of them): only the last is read, the sum
        last = DimShuffle(2, ("x", 0, 1))(total)  # (one kept: a view, no copy)
        if s.keep != 1:
            last = broadcast_to(last, (minimum(add(parts.n_steps, 1), s.keep),
                                       shape_i(total, 0), shape_i(total, 1)))
        if not _fits(s.old.type, last.type):
            return None
        return [*pairs, (s.old, last)]


class ScanPushInSeqs(ScanRewriter):
    """See the module docstring."""

    name = "scan_push_in_seqs"

    def rewrite(self, fgraph, node):
        parts = ScanParts.of(node)
        readers = _readers(_body(parts))
        outputs = set(parts.inner_outputs())
        for seq in parts.seqs:
            if not all(readers.get(v) and v not in outputs
                       and all(isinstance(n.op, Elemwise) for n in readers[v])
                       for v in seq.inner):
                continue
            found = _elementwise_rows(fgraph, node, seq.outer)
            if found is None:
                continue
            elem, views, lengths = found
            rows = []  # per operand of `elem`: its inner variable at each offset
            varying = None  # an operand's rows, of the sequence's length
            for i in elem.inputs:
                if i.type.shape[0] == 1:  # broadcast along the steps: one row for all
                    row = getitem(i, 0)
                    inner = row.type.make_variable()
                    parts.non_seqs.append(NonSeq(row, inner))
                    rows.append([inner] * len(seq.offsets))
                    continue
                outer = i
                for view in views:
                    outer = view.op.make_node(outer, *view.inputs[1:]).outputs[0]
                inner = [_row_type(outer).make_variable() for _ in seq.offsets]
                parts.seqs.append(Seq(outer, list(seq.offsets), inner))
                rows.append(inner)
                varying = outer
            replace = {}
            for k, v in enumerate(seq.inner):
                new = elem.op.make_node(*(r[k] for r in rows)).outputs[0]
                if not _fits(v.type, new.type):
                    return None
                replace[v] = new
            parts.seqs.remove(seq)
            parts.replace_inner(replace)
            return parts.build()[1] + [(n.outputs[0], shape_i(varying, 0)) for n in lengths]
        return None


def _readers(nodes) -> dict:
    """{variable: the nodes among `nodes` reading it}."""
    found: dict = {}
    for n in nodes:
        for i in n.inputs:
            found.setdefault(i, []).append(n)
    return found


def _elementwise_rows(fgraph, node, outer):
    """(the Elemwise node computing `outer`'s rows, the axis-0 slices between it and `outer`,
    innermost first, the nodes reading `outer`'s length) when `node` alone reads `outer`
    (others only its length: the loop's step count), each step of the way is read once, and
    the operands that vary along the steps provably have the result's number of rows (their
    rows are the result's rows' operands); else None."""
    views = []
    var = outer
    clients = fgraph.clients.get(var, ())
    lengths = [c for c, _ in clients if c is not node and c != OUTPUT
               and isinstance(c.op, ShapeI) and c.op.i == 0]
    if len(clients) != 1 + len(lengths) or sum(c is node for c, _ in clients) != 1:
        return None
    while var.owner is not None and isinstance(var.owner.op, Subtensor):
        op = var.owner.op
        if len(op.idx_list) != 1 or not isinstance(op.idx_list[0], tuple):
            return None  # (only a slice of axis 0 keeps each row a row of the same step)
        views.append(var.owner)
        var = var.owner.inputs[0]
        if not single_client(fgraph, var):
            return None
    elem = var.owner
    if elem is None or type(elem.op) is not Elemwise or len(elem.outputs) != 1 \
            or var.ndim == 0 or any(i.ndim != var.ndim for i in elem.inputs):
        return None
    length = dims_of(fgraph, var)[0]
    if any(i.type.shape[0] != 1 and not provably_equal(dims_of(fgraph, i)[0], length)
           for i in elem.inputs) \
            or all(i.type.shape[0] == 1 for i in elem.inputs):
        return None
    return elem, views[::-1], lengths


def _ancestors_within(var, among: set) -> set:
    """The variables of `among` that `var` depends on through variables of `among`."""
    seen, stack = set(), [var]
    while stack:
        v = stack.pop()
        if v in seen or v not in among:
            continue
        seen.add(v)
        if v.owner is not None:
            stack.extend(v.owner.inputs)
    return seen


scan_merge = register(ScanMerge(), phase="scan", tags=TAGS)
scan_merge_inputs = register(ScanMergeInputs(), phase="scan", tags=TAGS)
scan_inline_constants = register(ScanInlineConstants(), phase="scan", tags=TAGS)
scan_hoist_invariants = register(ScanHoistInvariants(), phase="scan", tags=TAGS)
scan_push_out_seqs = register(ScanPushOutSeqs(), phase="scan", tags=TAGS)
scan_push_out_outputs = register(ScanPushOutOutputs(), phase="scan", tags=TAGS)
scan_push_out_sums = register(ScanPushOutSums(), phase="scan", tags=TAGS)
scan_push_in_seqs = register(ScanPushInSeqs(), phase="scan", tags=TAGS)
# the views push-outs leave behind (a step's row batched to (T, 1, H), its axis then dropped)
# cancel here: canonicalize ran before the loop rewrites
scan_dimshuffle_dimshuffle = register(dimshuffle_dimshuffle, phase="scan",
                                      name="scan_dimshuffle_dimshuffle", tags=TAGS)
scan_dimshuffle_identity = register(dimshuffle_identity, phase="scan",
                                    name="scan_dimshuffle_identity", tags=TAGS)
