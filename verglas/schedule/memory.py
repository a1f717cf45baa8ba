"""The memory plan: storage slots, reused by later buffers of the same dtype and size."""

from __future__ import annotations

__all__ = ["plan_memory"]


def plan_memory(buffers, steps, live, size_of) -> tuple[list, list]:
    """Assign every temporary buffer that owns its storage to a slot.

    A slot freed after a buffer's last use is reused by a later buffer of the same dtype whose
    size is the same interned size variable. Returns (slot per buffer, (dtype, size) per slot).
    Views share their base's storage and inplace outputs take over their input's slot.
    A program output gets a slot of its own: the caller owns it, while the other slots can
    live in a workspace kept across calls.
    """
    slots: list = [None] * len(buffers)
    specs: list = []
    free: dict = {}  # (dtype, size var) -> free slot ids
    releases: dict = {}  # step index -> slots freed after it
    for step in steps:
        for b in step.outputs:
            buf = buffers[b]
            if buf.view_of is not None:
                continue
            if buf.takes_over is not None:
                slots[b] = slots[buf.takes_over]
            else:
                key = (buf.dtype, size_of(b))
                pool = None if buf.is_output else free.get(key)
                if pool:
                    slots[b] = pool.pop()
                else:
                    slots[b] = len(specs)
                    specs.append(key)
            if slots[b] is not None:
                releases.setdefault(live[b][1], []).append((slots[b], (buf.dtype, size_of(b))))
        for slot, key in releases.pop(step.index, ()):
            pool = free.setdefault(key, [])
            # an inplace output and the buffer it took over release one slot: free it once
            if slot is not None and slot not in pool \
                    and not _still_used(slot, slots, live, step.index):
                pool.append(slot)
    return slots, specs


def _still_used(slot, slots, live, now) -> bool:
    return any(s == slot and live[b][1] > now for b, s in enumerate(slots))
