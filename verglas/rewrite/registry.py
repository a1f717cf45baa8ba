"""The rewrite registry (named rewrites with a phase and tags) and modes (queries over it).

A theme module registers each rule into the phase it belongs to::

    @register(phase="canonicalize", tags=("fast_run", "fast_compile"))
    @node_rewriter(Mul)
    def mul_by_one(fgraph, node): ...

A Mode selects the entries carrying one of its `include` labels and none of its `exclude`
labels; an entry's labels are its tags, its name and its phase, so
`get_mode("fast_run").excluding("fusion", "mul_by_one")` drops a whole phase and one rule.
The order in which phases run is not here: it is `pipeline.PHASES`.
"""

from __future__ import annotations

from dataclasses import dataclass

from verglas.rewrite.engine import GraphRewriter, NodeRewriter, node_rewriter

__all__ = ["MODES", "REWRITES", "Entry", "Mode", "Registry", "get_mode", "phase_rule", "register"]


@dataclass(frozen=True)
class Entry:
    """One registered rewrite."""

    name: str
    rewriter: NodeRewriter | GraphRewriter
    phase: str
    tags: frozenset[str]

    @property
    def labels(self) -> frozenset[str]:
        return self.tags | {self.name, self.phase}


class Registry:
    """Named rewrites, each in one phase with tags; kept in registration order."""

    def __init__(self):
        self._entries: dict[str, Entry] = {}
        self.cache: dict = {}  # built pipelines per mode; cleared when an entry is added

    def register(self, rewriter=None, *, phase: str, name: str | None = None,
                 tags=("fast_run",)):
        """Register `rewriter` into `phase` (returns it); without `rewriter`, a decorator."""
        if rewriter is None:
            return lambda r: self.register(r, phase=phase, name=name, tags=tags)
        if not isinstance(rewriter, (NodeRewriter, GraphRewriter)):
            raise TypeError(f"register: {rewriter!r} is neither a NodeRewriter nor a "
                            f"GraphRewriter")
        name = name or rewriter.name
        if name in self._entries:
            raise ValueError(f"register: a rewrite named {name!r} is already registered")
        tags = frozenset([tags] if isinstance(tags, str) else tags)
        self._entries[name] = Entry(name, rewriter, phase, tags)
        self.cache.clear()
        return rewriter

    def __getitem__(self, name: str) -> Entry:
        return self._entries[name]

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def __iter__(self):
        return iter(self._entries.values())

    def __len__(self):
        return len(self._entries)

    def query(self, mode: Mode, phase: str | None = None) -> list[Entry]:
        """The entries `mode` selects (of `phase` only, when given), in registration order."""
        return [e for e in self._entries.values()
                if (phase is None or e.phase == phase) and mode.selects(e)]


class Mode:
    """A query over the registry: entries with a label in `include` and none in `exclude`."""

    __slots__ = ("exclude", "include", "name")

    def __init__(self, include=(), exclude=(), name: str | None = None):
        object.__setattr__(self, "include", _labels(include))
        object.__setattr__(self, "exclude", _labels(exclude))
        object.__setattr__(self, "name", name)

    def __setattr__(self, key, value):
        raise AttributeError("Mode is immutable")

    def selects(self, entry: Entry) -> bool:
        labels = entry.labels
        return not labels.isdisjoint(self.include) and labels.isdisjoint(self.exclude)

    def including(self, *labels: str) -> Mode:
        """This mode also selecting entries with one of `labels`."""
        return Mode(self.include | _labels(labels), self.exclude - _labels(labels))

    def excluding(self, *labels: str) -> Mode:
        """This mode without the entries carrying one of `labels` (tags, names or phases)."""
        return Mode(self.include, self.exclude | _labels(labels))

    def __eq__(self, other):
        return (isinstance(other, Mode) and self.include == other.include
                and self.exclude == other.exclude)

    def __hash__(self):
        return hash((self.include, self.exclude))

    def __reduce__(self):
        return (Mode, (tuple(sorted(self.include)), tuple(sorted(self.exclude)), self.name))

    def __repr__(self):
        if self.name is not None:
            return f"Mode({self.name!r})"
        exclude = f", exclude={sorted(self.exclude)}" if self.exclude else ""
        return f"Mode(include={sorted(self.include)}{exclude})"


def _labels(labels) -> frozenset[str]:
    return frozenset([labels] if isinstance(labels, str) else labels)


REWRITES = Registry()  # the rewrites of verglas: theme modules register into it on import
register = REWRITES.register


def phase_rule(phase: str, tags):
    """The decorator a theme module registers its node rules with: after
    `_rule = phase_rule("shape", TAGS)`, `@_rule(Elemwise, scalar_tracks=(s.Add,))` is
    `@register(phase="shape", tags=TAGS)` over `@node_rewriter(Elemwise, ...)`; a rule may
    name its own `tags`."""
    def rule(*tracks, scalar_tracks=(), tags=tags):
        def decorate(fn):
            return register(node_rewriter(*tracks, scalar_tracks=scalar_tracks)(fn),
                            phase=phase, tags=tags)
        return decorate
    return rule

MODES = {
    "fast_run": Mode(include=("fast_run",), name="fast_run"),  # every rewrite worth its time
    "fast_compile": Mode(include=("fast_compile",), name="fast_compile"),  # merge, essentials
}


def get_mode(mode: str | Mode) -> Mode:
    """The Mode named `mode` ("fast_run", "fast_compile"); a Mode is returned as is."""
    if isinstance(mode, Mode):
        return mode
    try:
        return MODES[mode]
    except KeyError:
        raise ValueError(f"unknown rewrite mode {mode!r}; known: {sorted(MODES)}") from None
