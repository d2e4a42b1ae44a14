"""A harness's report tables (`Section`s) in the terminal: as tables where their columns fit the width
with no word broken, else as a record a row."""

from __future__ import annotations

from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.table import Table
from rich.text import Text

from autodiscovery.objective import Section
from autodiscovery.review.display import compact


def sections_table(sections: list[Section]) -> Group:
    """A harness's report tables, one after the other; each as a table where its columns fit the width
    with no word broken, else as a record a row (`SectionView`)."""
    return Group(*(SectionView(sec) for sec in sections))


class SectionView:
    """One report table, laid out for the width it is given: columns, each as wide as its widest cell or heading, the
    widest narrowed to fit but never below its longest word (a cell then wraps between words); where
    that cannot fit, a record a row, its first cell heading the others (`head value`, joined
    by ' · ' and wrapped between them), so that no word is ever broken across lines."""

    def __init__(self, sec: Section) -> None:
        self.sec = sec
        self.texts = [[Text.from_markup(str(c)).plain for c in row] for row in sec.rows]

    def _column(self, i: int) -> list[str]:
        return [row[i] for row in self.texts if i < len(row)]

    def _widest_word(self, i: int) -> int:
        return max(len(w) for x in [self.sec.columns[i], *self._column(i)] for w in x.split() or [""])

    def table(self, widths: list[int]) -> Table:
        sec = self.sec
        t = compact(sec.title, sec.caption or None)
        t.padding = (0, 1, 0, 0)  # two spaces between columns: cells that wrap stay apart
        t.min_width = len(sec.title)  # a table narrower than its title would wrap the title
        for col, width in zip(sec.columns, widths):
            t.add_column(col, overflow="fold", width=width)
        for row in sec.rows:
            t.add_row(*row)
        return t

    def widths(self, console: Console, options: ConsoleOptions) -> list[int] | None:
        """Each column's width: its widest cell or heading, the widest text columns narrowed (never below
        their longest word) until the table fits the width; None where it cannot."""
        n = len(self.sec.columns)
        words = [self._widest_word(i) for i in range(n)]
        widths = [max(words[i], len(self.sec.columns[i]), *(len(x) for x in self._column(i))) for i in range(n)]
        room = options.max_width - (2 * n - 1)  # a space after each column, and a separator between two
        while sum(widths) > room:
            i = max(range(n), key=lambda j: widths[j] - words[j])
            if widths[i] <= words[i]:
                return None
            widths[i] -= 1
        return widths

    def records(self) -> Group:
        sec, parts = self.sec, []
        parts.append(Text(sec.title, style="italic", justify="center"))
        for row in self.texts:
            fields = [f"{head} {cell}" for head, cell in zip(sec.columns[1:], row[1:]) if cell not in ("", "–")]
            parts.append(Text.assemble((row[0] if row else "", "bold"), "  ", " · ".join(fields)))
        if sec.caption:
            parts.append(Text(sec.caption, style="dim"))
        return Group(*parts)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        widths = self.widths(console, options)
        yield self.table(widths) if widths is not None else self.records()
