"""Where the CPU codegen keeps temporaries: `Storage.adopt` lets a step's result be its input's
array (a copy saved) only where the memory plan allows it; checked on hand-made plans."""

from __future__ import annotations

from types import SimpleNamespace

from verglas.cpu_backend.codegen import ProgramSource
from verglas.cpu_backend.storage import Storage as _Storage


def _plan(live, slots, takes_over=None, outputs=(), dtypes=None):
    """A stand-in Program: buffer b lives over steps live[b] in slot slots[b]."""
    takes_over = takes_over or {}
    buffers = [SimpleNamespace(id=b, dtype=(dtypes or {}).get(b, "float64"),
                               takes_over=takes_over.get(b), is_output=b in outputs, ndim=1,
                               var=SimpleNamespace(type=SimpleNamespace(shape=(None,))),
                               itemsize=8)
               for b in range(len(live))]
    return SimpleNamespace(buffers=buffers, live=live, slots=slots)


def _storage(program, allocated, workspace=False):
    storage = _Storage(program, {b: f"b{b}" for b in range(len(program.live))},
                       ProgramSource("program"), workspace=workspace)
    for b in allocated:
        storage.alloc(b, "(n, )")
    return storage


def test_a_dying_input_hands_its_array_over():
    # b0 (slot 0) dies at step 1 where b1 (slot 1) is made; b2 reuses slot 0 later
    program = _plan(live=[(0, 1), (1, 3), (2, 3)], slots=[0, 1, 0])
    storage = _storage(program, [0])
    assert storage.adopt(1, 0, step=1) == "b1"
    assert storage.slot_storage[1][0] == "b0"
    assert 0 not in storage.slot_storage  # slot 0's next buffer gets a new array
    assert storage.alloc(2, "(n, )") == "b2"
    assert storage.em.lines[-1].strip() == "b2 = empty0((n, ), np.float64)"


def test_the_slots_swap_arrays_when_the_result_outlives_its_input():
    # slot 1 held b3's array (dead before step 2): after the swap slot 0 gets it back
    program = _plan(live=[(0, 4), (2, 6), (5, 6), (1, 1)], slots=[0, 1, 0, 1])
    storage = _storage(program, [3, 0])
    assert storage.adopt(1, 0, step=2) == "b1"
    assert storage.slot_storage[1][0] == "b0" and storage.slot_storage[0][0] == "b3"


def test_a_result_dying_first_shares_the_array_and_leaves_the_slots():
    program = _plan(live=[(0, 6), (2, 4)], slots=[0, 1])
    storage = _storage(program, [0])
    assert storage.adopt(1, 0, step=2) == "b1"
    assert storage.slot_storage == {0: ("b0", "(n, )", True)}


def test_no_sharing_when_either_is_destroyed_while_the_other_lives():
    program = _plan(live=[(0, 5), (2, 6), (5, 6)], slots=[0, 1, 0], takes_over={2: 0})
    assert _storage(program, [0]).adopt(1, 0, step=2) is None
    program = _plan(live=[(0, 5), (2, 6), (4, 6)], slots=[0, 1, 1], takes_over={2: 1})
    assert _storage(program, [0]).adopt(1, 0, step=2) is None


def test_a_dying_input_may_have_its_result_destroyed_later():
    program = _plan(live=[(0, 2), (2, 6), (4, 6)], slots=[0, 1, 1], takes_over={2: 1})
    assert _storage(program, [0]).adopt(1, 0, step=2) == "b1"


def test_no_sharing_with_program_outputs_or_arrays_outside_the_plan():
    # an output sharing its array with a live buffer, or the input being an output
    program = _plan(live=[(0, 6), (2, 7)], slots=[0, 1], outputs={1})
    assert _storage(program, [0]).adopt(1, 0, step=2) is None
    program = _plan(live=[(0, 7), (2, 4)], slots=[0, 1], outputs={0})
    assert _storage(program, [0]).adopt(1, 0, step=2) is None
    # a view or an input (no slot), a slot not allocated yet, another dtype
    program = _plan(live=[(0, 2), (2, 4)], slots=[None, 1])
    assert _storage(program, []).adopt(1, 0, step=2) is None
    program = _plan(live=[(0, 2), (2, 4)], slots=[0, 1])
    assert _storage(program, []).adopt(1, 0, step=2) is None
    program = _plan(live=[(0, 2), (2, 4)], slots=[0, 1], dtypes={1: "float32"})
    assert _storage(program, [0]).adopt(1, 0, step=2) is None


def test_with_a_workspace_only_slots_without_outputs_are_carved_from_it():
    # b0 dies at step 2, b2 (a program output) gets a slot of its own, b1 reuses slot 0
    program = _plan(live=[(0, 2), (2, 4), (3, 5)], slots=[0, 0, 1], outputs={2})
    storage = _storage(program, [0, 1, 2], workspace=True)
    assert [line.strip() for line in storage.em.lines] == [
        "b0, wo = ws_take0(ws, wo, (n, ), np.float64)",
        "b1 = b0",
        "b2, on0 = ws_take0(ob0, 0, (n, ), np.float64)"]  # (its own block: see runtime)
    assert storage.used_workspace and storage.blocks == [("ob0", "on0")]


def test_an_output_made_in_a_branch_gets_a_new_array():
    # a block is one array per call: an allocation that may run more than once takes none
    program = _plan(live=[(0, 4)], slots=[0], outputs={0})
    storage = _Storage(program, {0: "b0"}, ProgramSource("program"), workspace=True)
    with storage.em.indent():
        storage.alloc(0, "(n, )")
    assert storage.em.lines[-1].strip() == "b0 = empty0((n, ), np.float64)"
    assert not storage.blocks


def test_an_output_never_takes_a_workspace_array():
    # b1 (an output) would take the dying b0's workspace array: refused, it gets a new one
    program = _plan(live=[(0, 1), (1, 3)], slots=[0, 1], outputs={1})
    assert _storage(program, [0], workspace=True).adopt(1, 0, step=1) is None
    # without a workspace b0's array is new, and the output takes it
    assert _storage(program, [0]).adopt(1, 0, step=1) == "b1"
    # nor does a slot that later holds an output get a workspace array through a swap
    program = _plan(live=[(0, 4), (5, 6), (2, 5)], slots=[0, 1, 1], outputs={1})
    storage = _storage(program, [0], workspace=True)
    assert storage.adopt(2, 0, step=2) is None


def test_workspace_intrinsics_reserve_carve_and_refuse_absurd_sizes():
    import numba
    import numpy as np
    import pytest

    from verglas.cpu_backend.intrinsics import WORKSPACE_TOO_BIG, ws_add, ws_carve, ws_reserve

    @numba.njit
    def need(a, b, c):
        return ws_add(ws_add(0, (a, b), np.float64), (c,), np.float32)

    assert need(3, 4, 5) == 192  # 96 bytes end at 128 (aligned), 20 more at 192
    for dims in ((1 << 40, 1 << 40, 1), (-1, 2, 3), (1 << 30, 1 << 30, 1 << 61)):
        assert need(*dims) == WORKSPACE_TOO_BIG  # overflow or a negative dim saturates

    @numba.njit
    def carve(ws, n):
        ws = ws_reserve(ws, n)
        a = ws_carve(ws, 64, (2, 3), np.float64)
        a[:] = 2.0
        return ws, a

    ws = np.zeros(128, np.uint8)
    same, a = carve(ws, 112)
    assert same is ws and a.sum() == 12.0 and ws[64:112].view(np.float64).sum() == 12.0
    grown, _ = carve(ws, 1000)
    assert grown is not ws and grown.size == 1000
    with pytest.raises(ValueError, match="too large"):
        carve(ws, WORKSPACE_TOO_BIG)
