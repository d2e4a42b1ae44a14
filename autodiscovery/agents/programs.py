"""The programs a proposal may start from, and the ones it is shown for inspiration.

A greedy agent that only ever edits the incumbent cannot build on a change that is slower at first
(mma.sync to wgmma loses before it wins). The program database keeps a few candidates worth building
on: the incumbent, the best of each family (a rewrite is its own family), and recent near misses, the
measured candidates within a few percent of the incumbent. Each proposal draws a parent from it (the
incumbent more often than the rest) and a few other entries as inspirations, shown with their code and
figures. Whatever its parent, a proposal is measured and decided against the incumbent.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from autodiscovery.interfaces import History, Record


@dataclass(frozen=True)
class Entry:
    record: Record
    role: str
    """Why it is in the database, in words: 'the incumbent', 'best of wgmma_ws', 'near miss (-1.2%)'."""


@dataclass(frozen=True)
class Draw:
    """What one proposal is built from and shown."""

    parent: Entry
    inspirations: tuple[Entry, ...] = ()
    variant: int = 0
    """How many earlier proposals of the same batch drew the same parent and inspirations: the request
    of the n-th such one is made at another temperature."""


FLOOR = 0.02
"""The least weight of an entry in a draw."""


@dataclass
class Programs:
    entries: list[Entry] = field(default_factory=list)
    higher: bool = True
    """Whether a higher score is better (a speed-up) or a lower one (a time, a count)."""

    @classmethod
    def of(cls, history: History, near: float = 0.03, recent: int = 12, near_misses: int = 3) -> Programs:
        """The database for `history`: the incumbent first, then each family's best (best first), then up
        to `near_misses` of the last `recent` measured candidates within `near` of the incumbent."""
        higher = history.objective.higher_is_better
        measured = [r for r in history.records if r.score is not None]
        scored = {id(r): r.score for r in measured if r.score is not None}
        inc = history.incumbent or (history.records[0] if history.records else None)
        if inc is None:
            return cls([], higher)
        entries, taken = [Entry(inc, "the incumbent")], {inc.source_hash}

        def better(r: Record) -> float:
            score = scored[id(r)]
            return score if higher else -score

        best: dict[str, Record] = {}
        for r in measured:
            fam = r.family or "unknown"
            if fam not in best or better(r) > better(best[fam]):
                best[fam] = r
        for fam, r in sorted(best.items(), key=lambda kv: -better(kv[1])):
            if r.source_hash not in taken:
                entries.append(Entry(r, f"best of {fam}"))
                taken.add(r.source_hash)
        if inc.score is not None:
            close = []
            for r in reversed(measured[-recent:]):
                gap = (scored[id(r)] - inc.score) / inc.score * (1 if higher else -1)
                if r.source_hash not in taken and not r.kept and gap >= -near:
                    close.append(Entry(r, f"near miss ({gap:+.1%} against the incumbent)"))
                    taken.add(r.source_hash)
            entries += close[:near_misses]
        return cls(entries, higher)

    def __len__(self) -> int:
        return len(self.entries)

    def weight(self, e: Entry) -> float:
        """How likely an entry is drawn, as parent or inspiration: its score relative to the incumbent's
        (a naive kernel at 0.001× of it is rarely worth a request), never below FLOOR."""
        inc, r = self.entries[0].record, e.record
        if inc.score is None or r.score is None or not inc.score or not r.score:
            return FLOOR
        return max(FLOOR, r.score / inc.score if self.higher else inc.score / r.score)

    def draw(self, rng: random.Random, inspirations: int = 2, exploit: float = 0.5) -> Draw:
        """A parent (the incumbent with probability `exploit`, else another entry by weight) and up to
        `inspirations` other entries, drawn by weight without repeats."""
        first, rest = self.entries[0], self.entries[1:]
        parent = first if not rest or rng.random() < exploit else \
            rng.choices(rest, weights=[self.weight(e) for e in rest])[0]
        return self.around(parent, rng, inspirations)

    def around(self, parent: Entry, rng: random.Random, inspirations: int = 2) -> Draw:
        """`parent` (an entry or not) with up to `inspirations` other entries, drawn by weight."""
        others = [e for e in self.entries if e.record.seq != parent.record.seq]
        chosen: list[Entry] = []
        while others and len(chosen) < inspirations:
            pick = rng.choices(others, weights=[self.weight(e) for e in others])[0]
            chosen.append(pick)
            others.remove(pick)
        return Draw(parent, tuple(chosen))

    def draws(self, rng: random.Random, n: int, inspirations: int = 2, exploit: float = 0.5,
              tries: int = 8) -> list[Draw]:
        """`n` draws for one batch, each redrawn (up to `tries` times) until it differs from the earlier
        ones by parent or inspirations; a repeat that remains is marked as a further `variant`."""
        out: list[Draw] = []
        seen: dict[tuple, int] = {}
        for _ in range(n):
            for _try in range(tries):
                d = self.draw(rng, inspirations, exploit)
                key = (d.parent.record.seq, tuple(sorted(e.record.seq for e in d.inspirations)))
                if key not in seen:
                    break
            variant = seen.get(key, -1) + 1
            seen[key] = variant
            out.append(Draw(d.parent, d.inspirations, variant))
        return out
