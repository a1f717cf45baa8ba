"""The generated-source emitter: its name allocator never gives out a name the code spells
out itself (a shared kernel's parameters p0, s0, o0: fuzz seed 33714 was one such clash)."""

from __future__ import annotations

from verglas.source import Emitter


def test_fresh_names_skip_reserved_ones():
    em = Emitter()
    em.reserve(["p0", "p2", "o0"])
    assert [em.fresh("p") for _ in range(3)] == ["p1", "p3", "p4"]
    assert em.fresh("o") == "o1"
    assert em.fresh("q") == "q0"


def test_functions_of_one_module_share_the_allocator():
    parent, kernel = Emitter(), Emitter()
    kernel.share_names(parent)
    kernel.reserve(["s0"])
    assert parent.fresh("s") == "s1"  # (a reservation holds module-wide)
    assert kernel.fresh("s") == "s2"
    assert parent.fresh("t") == "t0" and kernel.fresh("t") == "t1"
