"""Features: objects attached to a FunctionGraph that react to its events or offer methods.

A method that reacts to an event is marked with `@callback` and only marked methods are
dispatched. Methods a Feature offers on the graph are named in its `provides` tuple and are
called as `fgraph.<name>(...)`, which resolves to `feature.<name>(fgraph, ...)`.
Features pickle with their plain instance state.
"""

from __future__ import annotations

CALLBACKS = ("on_attach", "on_detach", "on_import", "on_prune", "on_change_input", "validate")

__all__ = ["Feature", "callback", "History", "ReplaceValidate", "InconsistencyError",
           "AlreadyThere", "CALLBACKS"]


class InconsistencyError(Exception):
    """A validating Feature found the graph in an invalid state."""


class AlreadyThere(Exception):
    """A Feature (or a provided name) is already attached to the graph."""


def callback(method):
    """Mark `method` as a graph-event callback; its name must be one of CALLBACKS."""
    if method.__name__ not in CALLBACKS:
        raise ValueError(f"@callback: {method.__name__!r} is not one of {CALLBACKS}")
    method._verglas_callback = True
    return method


class Feature:
    """Base class of graph features."""

    provides: tuple[str, ...] = ()
    callbacks: frozenset[str] = frozenset()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        names = set()
        for klass in reversed(cls.__mro__):
            for name, value in vars(klass).items():
                if getattr(value, "_verglas_callback", False):
                    names.add(name)
        cls.callbacks = frozenset(names)
        for name in cls.provides:
            if not callable(getattr(cls, name, None)):
                raise TypeError(f"{cls.__name__}.provides names {name!r}, which it lacks")


class History(Feature):
    """Records input changes so that `fgraph.revert(checkpoint)` can undo them."""

    provides = ("checkpoint", "revert")

    def __init__(self):
        self.log: list[tuple] = []
        self._reverting = False

    @callback
    def on_attach(self, fgraph):
        self.log = []

    @callback
    def on_change_input(self, fgraph, node, i, old, new, reason):
        if not self._reverting:
            self.log.append((node, i, old, new))

    def checkpoint(self, fgraph) -> int:
        return len(self.log)

    def revert(self, fgraph, checkpoint: int) -> None:
        self._reverting = True
        try:
            while len(self.log) > checkpoint:
                node, i, old, new = self.log.pop()
                fgraph.change_node_input(node, i, old, reason="revert", check=False)
        finally:
            self._reverting = False


class ReplaceValidate(Feature):
    """Replacements that are validated as a whole and rolled back when validation fails."""

    provides = ("replace_validate", "replace_all_validate")

    @callback
    def on_attach(self, fgraph):
        if not any(isinstance(f, History) for f in fgraph.features):
            fgraph.attach_feature(History())

    def replace_validate(self, fgraph, old, new, reason=None) -> None:
        self.replace_all_validate(fgraph, [(old, new)], reason)

    def replace_all_validate(self, fgraph, pairs, reason=None) -> None:
        chk = fgraph.checkpoint()
        try:
            for old, new in pairs:
                fgraph.replace(old, new, reason=reason)
            fgraph.validate()
        except Exception:
            fgraph.revert(chk)
            raise
