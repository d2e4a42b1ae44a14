"""Guard zones: every buffer a candidate is given sits between two zones of bytes that nothing may write,
filled with a pattern drawn afresh before a launch and verified after it. A write outside a buffer that
lands on memory it does not own faults nowhere when that memory is another live tensor; the zones make
such a write visible, and say where it went.

This module is the accounting, with no GPU: where each buffer and its zones sit in one allocation (so
the zones are the buffer's real neighbours, whatever a caching allocator would have put there), and
what a changed zone means in words. Each harness fills and verifies the zones on its own device.
"""

from __future__ import annotations

from dataclasses import dataclass

GUARD_BYTES = 64 << 10
"""The least a zone holds on each side of a buffer."""
ALIGN = 256
"""Every buffer starts on this boundary (what cudaMalloc gives; vector and TMA loads need 16 or 128)."""


def _up(n: int, to: int = ALIGN) -> int:
    return -(-n // to) * to


@dataclass(frozen=True)
class Slot:
    """One buffer in an arena: its name, where it starts and how many bytes it holds, and its zones
    ([before, start) and [end, after))."""

    name: str
    before: int
    start: int
    size: int
    after: int

    @property
    def end(self) -> int:
        return self.start + self.size

    def zones(self) -> list[tuple[str, int, int]]:
        """(side, first byte, one past the last byte) of each zone."""
        return [("before", self.before, self.start), ("after", self.end, self.after)]


def layout(buffers: list[tuple[str, int]], guard: int = GUARD_BYTES) -> tuple[int, list[Slot]]:
    """Place each (name, bytes) buffer between zones of at least `guard` bytes, one after another; the
    bytes between a buffer's end and the next alignment boundary belong to its zone after. Returns the
    arena's size and the slots."""
    slots, at = [], 0
    guard = _up(guard)
    for name, size in buffers:
        start = at + guard
        after = _up(start + size + guard)
        slots.append(Slot(name, at, start, size, after))
        at = after
    return at, slots


def zones(slots: list[Slot]) -> list[tuple[Slot, str, int, int]]:
    """Every zone of the arena, with its buffer and side."""
    return [(s, side, lo, hi) for s in slots for side, lo, hi in s.zones()]


def describe(slot: Slot, side: str, changed: list[int]) -> str:
    """A zone found changed, in words: `changed` are the offsets (from the arena's start) of the bytes
    that no longer hold the pattern. The extent is measured from the buffer's edge to the farthest byte
    written: a write of N bytes right after a buffer reads "wrote N bytes past the end"."""
    if side == "after":
        reach = max(changed) - slot.end + 1
        where = f"past the end of {slot.name}"
    else:
        reach = slot.start - min(changed)
        where = f"before the start of {slot.name}"
    return f"wrote {reach} bytes {where} ({len(changed)} bytes of its guard zone changed)"


def findings(slots: list[Slot], changed: list[int]) -> list[str]:
    """Every zone that holds a changed byte, described (changed: arena offsets, any order)."""
    out = []
    for slot, side, lo, hi in zones(slots):
        inside = [c for c in changed if lo <= c < hi]
        if inside:
            out.append(describe(slot, side, inside))
    return out
