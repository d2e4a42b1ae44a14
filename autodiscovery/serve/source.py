"""A candidate's source as highlighted, escaped HTML (Pygments: its text is never markup), and times in
words."""

from __future__ import annotations

from typing import Any

from markupsafe import Markup
from pygments import highlight as pygmentize
from pygments.formatters import HtmlFormatter
from pygments.lexers import CudaLexer, PythonLexer, TextLexer

MAX_HIGHLIGHTED = 400_000
"""Characters past which a source is shown plain (escaped), not highlighted: a page stays quick."""


def _lexer(source: str) -> Any:
    """CUDA for kernels (every shipped harness's), Python for Python (a toy harness's), else plain."""
    head = source.lstrip()[:2000]
    if "__global__" in source or "#include" in head or head.startswith(("/*", "//")):
        return CudaLexer()
    if head.startswith(("def ", "import ", "from ", "class ", '"""')):
        return PythonLexer()
    return TextLexer()


def highlight(source: str) -> Markup:
    """The source in a `<div class="highlight">` with line numbers."""
    if len(source) > MAX_HIGHLIGHTED:
        return Markup('<div class="highlight"><pre>{}</pre></div>').format(source)
    return Markup(pygmentize(source, _lexer(source), HtmlFormatter(linenos="inline", cssclass="highlight")))


def duration(seconds: float | None) -> str:
    """'45 s', '3 min 12 s', '2 h 05 min'."""
    if seconds is None:
        return "–"
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"
