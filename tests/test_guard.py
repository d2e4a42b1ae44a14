"""Guard-zone accounting (no GPU): where buffers and their zones sit in one allocation, and what a
changed zone says."""

from __future__ import annotations

import numpy as np
import pytest

from autodiscovery.toolkit import guard


def test_every_buffer_sits_between_zones_of_at_least_64_kib():
    total, slots = guard.layout([("x", 32 << 20), ("out", 8192), ("partial", 6), ("empty", 0)])
    assert total == slots[-1].after
    at = 0
    for s in slots:
        assert s.before == at and s.start % guard.ALIGN == 0
        assert s.start - s.before >= guard.GUARD_BYTES and s.after - s.end >= guard.GUARD_BYTES
        assert s.after % guard.ALIGN == 0
        at = s.after
    # the zones cover every byte that is not a buffer's: a write anywhere outside a buffer lands in one
    covered = np.zeros(total, bool)
    for s in slots:
        covered[s.start:s.end] = True
    for _, _, lo, hi in guard.zones(slots):
        assert not covered[lo:hi].any()
        covered[lo:hi] = True
    assert covered.all()


def simulate(write: slice, buffers=(("x", 4096), ("out", 8192))) -> list[str]:
    """An arena as bytes: zones hold a pattern of 1-255, a kernel writes zeros at `write` (arena offsets
    relative to `out`'s start), the changed bytes are read back."""
    total, slots = guard.layout(list(buffers))
    arena = np.zeros(total, np.uint8)
    rng = np.random.default_rng(1)
    for _, _, lo, hi in guard.zones(slots):
        arena[lo:hi] = rng.integers(1, 256, hi - lo)
    before = arena.copy()
    out = slots[1]
    arena[out.start + write.start:out.start + write.stop] = 0
    changed = np.flatnonzero(arena != before)
    zone_bytes = [c for c in changed.tolist() if not any(s.start <= c < s.end for s in slots)]
    return guard.findings(slots, zone_bytes)


def test_a_write_past_the_end_is_named_with_its_buffer_side_and_bytes():
    assert simulate(slice(8192, 8192 + 65536)) == [
        "wrote 65536 bytes past the end of out (65536 bytes of its guard zone changed)"]


def test_a_write_before_the_start_is_named_too():
    assert simulate(slice(-1024, 16)) == ["wrote 1024 bytes before the start of out (1024 bytes of its guard zone changed)"]


def test_a_write_inside_the_buffer_changes_no_zone():
    assert simulate(slice(0, 8192)) == []


@pytest.mark.parametrize("n", [1, 7, 300])
def test_a_short_write_past_an_unaligned_end_is_caught(n):
    """`partial` of 6 bytes: the 250 bytes up to the next boundary are its zone too."""
    total, slots = guard.layout([("partial", 6)])
    p = slots[0]
    assert guard.findings(slots, list(range(p.end, p.end + n))) == [
        f"wrote {n} bytes past the end of partial ({n} bytes of its guard zone changed)"]
