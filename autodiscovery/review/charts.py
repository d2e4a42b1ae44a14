"""The report's charts in one style, for the core and for a harness's own charts (`roles.Charting`):
matplotlib without a display, the colours of kept, reverted and failed candidates, legends that name
only what is drawn, bar labels that keep clear of a baseline's line, and figures written as SVG or PNG."""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from markupsafe import Markup

if TYPE_CHECKING:
    from matplotlib.figure import Figure

KEPT, REVERTED, FAILED, BASELINE = "#1a7f37", "#8c959f", "#cf222e", "#0969da"
LABEL_GAP = 4
"""Points between a label and what it labels, on the side away from the baseline's line."""


@dataclass
class Figures:
    """Each chart by name, as a matplotlib figure."""

    figs: dict[str, Figure] = field(default_factory=dict)
    titles: dict[str, str] = field(default_factory=dict)
    """The heading a chart gets in the page where no table introduces it."""

    def svg(self, name: str) -> Markup:
        buf = io.StringIO()
        self.figs[name].savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
        text = buf.getvalue()
        text = text[text.index("<svg"):]  # no XML declaration or DOCTYPE inside HTML
        text = re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.S)
        return Markup(text)

    def png(self, directory: Path) -> list[Path]:
        directory.mkdir(parents=True, exist_ok=True)
        out = []
        for name, fig in self.figs.items():
            path = directory / f"{name}.png"
            fig.savefig(path, format="png", dpi=120, bbox_inches="tight")
            out.append(path)
        return out

    def close(self) -> None:
        import matplotlib.pyplot as plt

        for fig in self.figs.values():
            plt.close(fig)


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.hashsalt": "autodiscovery", "font.size": 9, "axes.spines.top": False,
                         "axes.spines.right": False})
    return plt


def legend(ax: Any, **kwargs: Any) -> None:
    """A legend of the series that have something drawn: an empty series gets no entry, and an axes with
    none gets no legend."""
    from matplotlib.container import Container

    def drawn(handle: Any) -> bool:
        if isinstance(handle, Container):
            return len(handle) > 0
        if hasattr(handle, "get_offsets"):  # scatter
            return len(handle.get_offsets()) > 0
        if hasattr(handle, "get_xdata"):  # lines
            return len(handle.get_xdata()) > 0
        return True

    shown = [(h, label) for h, label in zip(*ax.get_legend_handles_labels()) if drawn(h)]
    if shown:
        ax.legend([h for h, _ in shown], [label for _, label in shown], **kwargs)


def bar_label(ax: Any, x: float, top: float, text: str, baseline: float | None, per_point: float) -> None:
    """A bar's label just above its top, or inside the bar where the baseline's line would run through
    the label (`per_point`: data units a point)."""
    size = 7
    room = (LABEL_GAP + 1.4 * size + 3) * per_point  # the label and its gap, with a margin
    if baseline is None or not top < baseline < top + room:
        ax.annotate(text, (x, top), xytext=(0, LABEL_GAP), textcoords="offset points", ha="center", va="bottom",
                    fontsize=size)
    elif top > room:
        ax.annotate(text, (x, top), xytext=(0, -LABEL_GAP), textcoords="offset points", ha="center", va="top",
                    fontsize=size, color="white")
    else:  # a bar too short to hold it, just under the line: above the line
        ax.annotate(text, (x, baseline), xytext=(0, LABEL_GAP), textcoords="offset points", ha="center",
                    va="bottom", fontsize=size)


