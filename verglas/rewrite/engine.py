"""The rewrite engine: node rewriters, walkers, equilibrium, sequences and merge (CSE).

A node rewriter is a module-level function `(fgraph, node) -> list[Variable] | None` (one
replacement per output of `node`; None: no match) declaring the op classes it tracks. Algebra
rules are written with `match ... case`::

    @node_rewriter(Neg)
    def neg_neg(fgraph, node):
        "neg(neg(x)) -> x"
        match node.inputs:
            case [Variable(owner=Apply(op=Neg(), inputs=[x]))]:
                return [x]

    @node_rewriter(Elemwise, scalar_tracks=(Exp,))   # Elemwise nodes whose scalar_op is an Exp
    def exp_log(fgraph, node): ...

A rule returns None when its pattern does not match, and a replacement of the original
variable's type (or a more specific one). Rewriters are visited only on nodes whose op class
(and `op.scalar_op` class, for `scalar_tracks`) they track: a walker looks them up in a dict
keyed by op class. Walkers and the equilibrium replace through `fgraph.replace_all_validate`
when a ReplaceValidate feature is attached (a failed validation means "no match"), else through
`fgraph.replace_all`. Inner graphs are opaque: no walker enters them.
"""

from __future__ import annotations

import gc
import sys
import time
from collections import Counter
from contextlib import contextmanager

from verglas.graph import (
    Constant,
    Feature,
    FunctionGraph,
    InconsistencyError,
    Op,
    Variable,
    callback,
    intern_constant,
)
from verglas.rewrite.trace import RewriteError, Tracer

__all__ = [
    "IN_TO_OUT",
    "OUT_TO_IN",
    "EquilibriumRewriter",
    "FunctionRewriter",
    "GraphRewriter",
    "NodeRewriter",
    "RewriteRun",
    "SequenceRewriter",
    "WalkingRewriter",
    "graph_rewriter",
    "in_to_out",
    "merge",
    "node_rewriter",
    "out_to_in",
]

IN_TO_OUT = "in_to_out"
OUT_TO_IN = "out_to_in"


class _ByReference:
    """Pickles as a reference to the module attribute it is bound to, like a function."""

    def __reduce__(self):
        owner = sys.modules.get(self.__module__)
        target = owner
        for part in self.__qualname__.split("."):
            target = getattr(target, part, None)
        if target is self:
            return self.__qualname__
        return self._reduce_by_value()

    @property
    def _fn_ref(self):
        """`fn`, or the decorated rewriter holding it when that shadows it in its module."""
        holder = getattr(sys.modules.get(self.fn.__module__), self.fn.__name__, None)
        return holder if getattr(holder, "fn", None) is self.fn else self.fn


def _unwrap(fn_or_holder):
    return getattr(fn_or_holder, "fn", fn_or_holder)


class NodeRewriter(_ByReference):
    """A local rule `fn(fgraph, node) -> list[Variable] | None` and the ops it tracks.

    `tracks`: a tuple of Op classes (None: every op); `scalar_tracks`: classes that
    `node.op.scalar_op` must be an instance of (empty: no condition).
    """

    def __init__(self, fn, tracks, scalar_tracks=(), name: str | None = None):
        self.fn = fn
        self.tracks = tracks
        self.scalar_tracks = tuple(scalar_tracks)
        self.name = name or fn.__name__
        self.__module__ = fn.__module__
        self.__qualname__ = getattr(fn, "__qualname__", self.name)
        self.__doc__ = fn.__doc__

    def __call__(self, fgraph, node):
        return self.fn(fgraph, node)

    def tracks_class(self, cls: type) -> bool:
        return self.tracks is None or issubclass(cls, self.tracks)

    def tracks_scalar(self, scalar_cls: type) -> bool:
        return not self.scalar_tracks or issubclass(scalar_cls, self.scalar_tracks)

    def _reduce_by_value(self):
        return (_rebuild_node_rewriter, (self._fn_ref, self.tracks, self.scalar_tracks,
                                         self.name))

    def __repr__(self):
        tracks = "all" if self.tracks is None else ", ".join(t.__name__ for t in self.tracks)
        return f"NodeRewriter({self.name}, tracks={tracks})"


def _rebuild_node_rewriter(fn, tracks, scalar_tracks, name):
    return NodeRewriter(_unwrap(fn), tracks, scalar_tracks, name)


def node_rewriter(*tracks, scalar_tracks=(), name: str | None = None):
    """Decorate `fn(fgraph, node)` into a NodeRewriter tracking the Op classes `tracks`.

    `@node_rewriter(None)` tracks every op; a single list or tuple of classes is accepted too.
    """
    if len(tracks) == 1 and isinstance(tracks[0], (list, tuple)):
        tracks = tuple(tracks[0])
    if tracks == (None,):
        tracks = None
    elif not tracks:
        raise TypeError("node_rewriter: name the Op classes it tracks, or None for every op")
    else:
        for t in tracks:
            if not (isinstance(t, type) and issubclass(t, Op)):
                raise TypeError(f"node_rewriter: tracks must be Op subclasses, got {t!r}")
    for t in scalar_tracks:
        if not isinstance(t, type):
            raise TypeError(f"node_rewriter: scalar_tracks must be classes, got {t!r}")

    def decorate(fn) -> NodeRewriter:
        return NodeRewriter(fn, tracks, scalar_tracks, name)

    return decorate


class _Dispatch:
    """The rewriters to try on an op, looked up by op class (then scalar-op class) and cached."""

    def __init__(self, rewriters):
        self.rewriters = tuple(rewriters)
        self._by_class: dict = {}

    def __getstate__(self):
        return {"rewriters": self.rewriters, "_by_class": {}}

    def lookup(self, op) -> tuple:
        cls = type(op)
        hit = self._by_class.get(cls)
        if hit is None:
            hit = self._by_class[cls] = self._for_class(cls)
        if type(hit) is tuple:
            return hit
        candidates, by_scalar = hit  # some candidate also looks at op.scalar_op
        scls = type(getattr(op, "scalar_op", None))
        found = by_scalar.get(scls)
        if found is None:
            found = by_scalar[scls] = tuple(r for r in candidates if r.tracks_scalar(scls))
        return found

    def _for_class(self, cls):
        candidates = tuple(r for r in self.rewriters if r.tracks_class(cls))
        if any(r.scalar_tracks for r in candidates):
            return [candidates, {}]  # a list: not mistaken for the plain tuple
        return candidates


class _Watch(Feature):
    """Collects nodes imported since the last fire and counts input changes (= graph changes)."""

    def __init__(self):
        self.imported: list = []
        self.changes = 0
        self.settled: dict = {}  # idempotent graph rewriter -> `changes` after its last call

    @callback
    def on_import(self, fgraph, node, reason):
        self.imported.append(node)

    @callback
    def on_change_input(self, fgraph, node, i, old, new, reason):
        self.changes += 1


@contextmanager
def _watching(fgraph: FunctionGraph):
    for feature in fgraph.features:
        if isinstance(feature, _Watch):
            yield feature
            return
    watch = _Watch()
    fgraph.attach_feature(watch)
    try:
        yield watch
    finally:
        fgraph.remove_feature(watch)


class RewriteRun:
    """What the rewriters of one run share: the graph's change watch and the tracer."""

    __slots__ = ("tracer", "watch")

    def __init__(self, watch: _Watch, tracer: Tracer):
        self.watch = watch
        self.tracer = tracer


class GraphRewriter:
    """Rewrites a whole FunctionGraph in place. Subclasses implement `apply(fgraph, run)`."""

    name = "graph_rewriter"

    def apply(self, fgraph: FunctionGraph, run: RewriteRun) -> None:
        raise NotImplementedError

    def __call__(self, fgraph: FunctionGraph, tracer: Tracer | None = None) -> FunctionGraph:
        """Run on `fgraph` (tracer options default to the environment); return `fgraph`."""
        tracer = Tracer.from_options() if tracer is None else tracer
        gc_was_enabled = gc.isenabled()
        gc.disable()  # rewriting allocates many objects and frees few: skip useless gc passes
        try:
            with _watching(fgraph) as watch:
                self.apply(fgraph, RewriteRun(watch, tracer))
        finally:
            if gc_was_enabled:
                gc.enable()
        return fgraph

    def __repr__(self):
        return f"{type(self).__name__}({self.name})"


class FunctionRewriter(_ByReference, GraphRewriter):
    """A graph rewriter from a module-level function `fn(fgraph) -> None`.

    `idempotent`: running it twice in a row changes nothing, so a run skips it while the
    graph has not changed since its last call (merge in every equilibrium pass costs nothing
    when the pass before fired nothing).
    """

    def __init__(self, fn, name: str | None = None, idempotent: bool = False):
        self.fn = fn
        self.name = name or fn.__name__
        self.idempotent = idempotent
        self.__module__ = fn.__module__
        self.__qualname__ = getattr(fn, "__qualname__", self.name)
        self.__doc__ = fn.__doc__

    def _reduce_by_value(self):
        return (_rebuild_function_rewriter, (self._fn_ref, self.name, self.idempotent))

    def apply(self, fgraph, run):
        tracer, watch, before = run.tracer, run.watch, run.watch.changes
        if self.idempotent and watch.settled.get(self) == before:
            return
        t0 = time.perf_counter()
        try:
            self.fn(fgraph)
        except RewriteError:  # already reported by a nested rewriter
            raise
        except Exception as exc:  # noqa: BLE001 - a failing rewrite is reported, not fatal
            tracer.failed(self.name, None, exc)
        changes = watch.changes - before
        if self.idempotent:
            watch.settled[self] = watch.changes
        if tracer.profile is not None:
            tracer.profile.record(self.name, time.perf_counter() - t0, changes > 0)
        if changes and tracer.echo:
            tracer.graph_fired(self.name, changes)


def _rebuild_function_rewriter(fn, name, idempotent):
    return FunctionRewriter(_unwrap(fn), name, idempotent)


def graph_rewriter(fn=None, *, idempotent: bool = False):
    """Decorate a module-level `fn(fgraph) -> None` into a graph rewriter
    (`@graph_rewriter` or `@graph_rewriter(idempotent=True)`)."""
    if fn is None:
        return lambda f: FunctionRewriter(f, idempotent=idempotent)
    return FunctionRewriter(fn, idempotent=idempotent)


class _Exhausted(Exception):
    """A rewrite fired more often than the graph size allows: a cycle, most likely."""


class _Budget:
    """Counts fires per rewrite against a limit proportional to the graph size, and who
    rewrote whose nodes, to name the rewrites that keep undoing each other."""

    def __init__(self, n_nodes: int, max_use_ratio: float):
        self.limit = int(max_use_ratio * (n_nodes + 16))
        self.fires: Counter = Counter()
        self.made_by: dict = {}  # node -> name of the rewrite whose fire imported it
        self.undone: Counter = Counter()  # (maker, rewriter) -> fires of rewriter on maker's nodes

    def spend(self, name: str, node, imported) -> None:
        self.fires[name] += 1
        maker = self.made_by.get(node)
        if maker is not None:
            self.undone[(maker, name)] += 1
        for new in imported:
            self.made_by[new] = name
        if self.fires[name] > self.limit:
            raise _Exhausted(name)

    def report(self, tracer: Tracer, where: str, reason: str) -> None:
        pair = self._pair()
        top = ", ".join(f"{n} ({c})" for n, c in self.fires.most_common(5))
        message = f"{where}: {reason}; rewrites that kept firing: {top or 'none'}"
        if pair is not None:
            a, b = pair
            message += (f"; {a!r} keeps undoing itself" if a == b
                        else f"; {a!r} and {b!r} keep undoing each other")
        tracer.no_fixed_point(message, dict(self.fires), pair)

    def _pair(self):
        both = [(min(c, self.undone[(b, a)]), (a, b)) for (a, b), c in self.undone.items()
                if a != b and self.undone[(b, a)]]
        if both:
            return max(both)[1]
        selfish = [(c, (a, b)) for (a, b), c in self.undone.items() if a == b]
        return max(selfish)[1] if selfish else None


def _replacer(fgraph: FunctionGraph):
    validate = getattr(fgraph, "replace_all_validate", None)
    return validate if validate is not None else fgraph.replace_all


def _compatible(old_type, new_type) -> bool:
    if old_type == new_type:
        return True
    is_super = getattr(old_type, "is_super", None)
    return is_super is not None and is_super(new_type)


def _replace_node(fgraph, node, new, rewriter, replace, tracer) -> bool:
    """Replace `node`'s outputs by `new` (checked); True when the graph changed."""
    outputs = node.outputs
    if not isinstance(new, (list, tuple)) or len(new) != len(outputs):
        tracer.failed(rewriter.name, node, RewriteError(
            f"returned {new!r}; expected a list of {len(outputs)} variable(s) or None"))
        return False
    pairs = []
    for old, var in zip(outputs, new):
        if var is old:
            continue
        if not isinstance(var, Variable) or not _compatible(old.type, var.type):
            got = var.type if isinstance(var, Variable) else type(var).__name__
            tracer.failed(rewriter.name, node, RewriteError(
                f"output {old.index} of type {old.type} replaced by {var!r} of type {got}"))
            return False
        pairs.append((old, var))
    if not pairs:
        return False
    try:
        replace(pairs, reason=rewriter.name)
    except InconsistencyError:  # the replacement is not valid here: no match
        return False
    except Exception as exc:  # noqa: BLE001 - a failing rewrite is reported, not fatal
        tracer.failed(rewriter.name, node, exc)
        return False
    return True


def _walk(fgraph, dispatch: _Dispatch, order: str, run: RewriteRun, budget: _Budget,
          nodes: list | None = None) -> list:
    """Visit each node once in `order` (and the nodes each fire imports, right away), trying
    its tracked rewriters until one fires. Nodes pruned meanwhile are skipped.

    `nodes`: the nodes in topological order when the caller knows it (else a toposort).
    Returns the nodes in the order visited, a topological order (reversed for out-to-in) of
    the graph after the walk once pruned nodes are dropped.
    """
    tracer, watch = run.tracer, run.watch
    profile, echo = tracer.profile, tracer.echo
    replace = _replacer(fgraph)
    alive = fgraph.apply_nodes
    by_class, lookup = dispatch._by_class, dispatch.lookup
    inward = order == IN_TO_OUT
    stack = fgraph.toposort() if nodes is None else nodes  # a stack: pop() gives the next node
    if inward:
        stack.reverse()
    visited = []
    watch.imported = []
    while stack:
        node = stack.pop()
        if node not in alive:
            continue
        visited.append(node)
        op = node.op
        rewriters = by_class.get(type(op))
        if type(rewriters) is not tuple:  # not cached yet, or depends on op.scalar_op
            rewriters = lookup(op)
        for rewriter in rewriters:
            try:
                if profile is None:
                    new = rewriter.fn(fgraph, node)
                else:
                    new = profile.call(rewriter, fgraph, node)
            except Exception as exc:  # noqa: BLE001 - a failing rewrite is reported, not fatal
                tracer.failed(rewriter.name, node, exc)
                continue
            if new is None:
                continue
            changed = _replace_node(fgraph, node, new, rewriter, replace, tracer)
            imported, watch.imported = watch.imported, []
            if not changed:
                continue
            if profile is not None:
                profile.fired(rewriter.name)
            if echo:
                tracer.fired(rewriter.name, node, new)
            budget.spend(rewriter.name, node, imported)
            # New nodes are visited next: in-to-out from their inputs, out-to-in from the top.
            stack.extend(reversed(imported) if inward else imported)
            break
    return visited


class WalkingRewriter(GraphRewriter):
    """One walk over the graph, in-to-out or out-to-in, applying node rewriters."""

    def __init__(self, rewriters, order: str = IN_TO_OUT, name: str | None = None,
                 max_use_ratio: float = 8):
        if order not in (IN_TO_OUT, OUT_TO_IN):
            raise ValueError(f"order must be {IN_TO_OUT!r} or {OUT_TO_IN!r}, not {order!r}")
        rewriters = [rewriters] if isinstance(rewriters, NodeRewriter) else list(rewriters)
        self.dispatch = _Dispatch(rewriters)
        self.order = order
        self.name = name or f"{order}({', '.join(r.name for r in rewriters)})"
        self.max_use_ratio = max_use_ratio

    def apply(self, fgraph, run):
        budget = _Budget(len(fgraph.apply_nodes), self.max_use_ratio)
        try:
            _walk(fgraph, self.dispatch, self.order, run, budget)
        except _Exhausted as exc:
            budget.report(run.tracer, self.name, f"{exc} fired more than {budget.limit} times")


def in_to_out(*rewriters: NodeRewriter, name: str | None = None) -> WalkingRewriter:
    """A walk from the inputs to the outputs applying `rewriters`."""
    return WalkingRewriter(rewriters, IN_TO_OUT, name)


def out_to_in(*rewriters: NodeRewriter, name: str | None = None) -> WalkingRewriter:
    """A walk from the outputs to the inputs applying `rewriters`."""
    return WalkingRewriter(rewriters, OUT_TO_IN, name)


class EquilibriumRewriter(GraphRewriter):
    """Graph rewriters then an in-to-out walk of node rewriters, repeated until nothing fires.

    Bounded: at most `max_passes` passes and `max_use_ratio * (nodes + 16)` fires per rewrite.
    Hitting a bound names the rewrites that kept firing and two that undo each other, and
    raises RewriteCycleError when the run is strict (else warns and stops).
    """

    def __init__(self, rewriters, graph_rewriters=(), name: str = "equilibrium",
                 max_passes: int = 50, max_use_ratio: float = 8):
        self.dispatch = _Dispatch(rewriters)
        self.graph_rewriters = tuple(graph_rewriters)
        self.name = name
        self.max_passes = max_passes
        self.max_use_ratio = max_use_ratio

    def apply(self, fgraph, run):
        budget = _Budget(len(fgraph.apply_nodes), self.max_use_ratio)
        watch, alive, order = run.watch, fgraph.apply_nodes, None
        try:
            for _ in range(self.max_passes):
                start = watch.changes
                for rewriter in self.graph_rewriters:
                    before = watch.changes
                    rewriter.apply(fgraph, run)
                    if watch.changes != before:
                        budget.spend(rewriter.name, None, ())
                        order = None
                if self.dispatch.rewriters:
                    # The last walk's order stays topological unless a graph rewriter changed
                    # the graph since: reuse it rather than sort again.
                    nodes = None if order is None else [n for n in order if n in alive]
                    order = _walk(fgraph, self.dispatch, IN_TO_OUT, run, budget, nodes)
                if watch.changes == start:
                    return
        except _Exhausted as exc:
            budget.report(run.tracer, self.name, f"{exc} fired more than {budget.limit} times")
            return
        budget.report(run.tracer, self.name, f"no fixed point after {self.max_passes} passes")


class SequenceRewriter(GraphRewriter):
    """Graph rewriters run once each, in order (a node rewriter runs as an in-to-out walk)."""

    def __init__(self, rewriters, name: str = "sequence"):
        self.rewriters = tuple(in_to_out(r) if isinstance(r, NodeRewriter) else r
                               for r in rewriters)
        self.name = name

    def apply(self, fgraph, run):
        for rewriter in self.rewriters:
            rewriter.apply(fgraph, run)


@graph_rewriter(idempotent=True)
def merge(fgraph: FunctionGraph) -> None:
    """CSE: equal constants become one object, then nodes applying the same op to the same
    inputs (by identity) become one. One pass in topological order, a dict lookup per node."""
    replace = _replacer(fgraph)
    alive = fgraph.apply_nodes
    seen: dict = {}
    for node in fgraph.toposort():
        if node not in alive:
            continue
        for var in node.inputs:
            if isinstance(var, Constant):
                canonical = intern_constant(var)
                if canonical is not var:
                    _try(replace, [(var, canonical)])
        key = (node.op, tuple(map(id, node.inputs)), tuple([o.type for o in node.outputs]))
        first = seen.setdefault(key, node)
        if first is not node:
            _try(replace, list(zip(node.outputs, first.outputs)))
    for var in list(fgraph.outputs):
        if isinstance(var, Constant) and intern_constant(var) is not var:
            _try(replace, [(var, intern_constant(var))])


def _try(replace, pairs) -> None:
    try:
        replace(pairs, reason="merge")
    except InconsistencyError:  # e.g. merging would break inplace validity: keep both
        pass
