"""Where a configuration file says what: a YAML mistake at the line where it is, and the line of each key
a file sets, so that an error about a key names its line (a campaign's, a search space's)."""

from __future__ import annotations

import yaml


class Source(str):
    """A campaign's source as messages name it (its file's name), with the line of each key the file
    sets: an error names the line of the key it is about."""

    lines: dict[tuple, int]

    def __new__(cls, name: str, lines: dict[tuple, int] | None = None) -> Source:
        made = super().__new__(cls, name)
        made.lines = lines or {}
        return made

    def at(self, where: str) -> str:
        """'file.yaml: line 12', the line of `where` (a.b.c, list items by index) or of the nearest key above
        it that the file sets; the name alone where it sets none."""
        path = tuple(int(p) if p.isdigit() else p for p in where.split("."))
        while path:
            if path in self.lines:
                return f"{self}: line {self.lines[path]}"
            path = path[:-1]
        return str(self)


def key_lines(text: str) -> dict[tuple, int]:
    """The line of every key and list item of a YAML document, by its path (keys, list items by index)."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return {}
    out: dict[tuple, int] = {}

    def walk(node: yaml.Node, path: tuple) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                here = (*path, key.value)
                out[here] = key.start_mark.line + 1
                walk(value, here)
        elif isinstance(node, yaml.SequenceNode):
            for i, value in enumerate(node.value):
                out[(*path, i)] = value.start_mark.line + 1
                walk(value, (*path, i))

    if root is not None:
        walk(root, ())
    return out


def yaml_error(exc: yaml.YAMLError) -> str:
    """A YAML error as one line: the line where the parser found the mistake, its reason in words (a line
    indented other than the lines around it, say), and where the construct it broke began, if earlier."""
    problem_mark, context_mark = getattr(exc, "problem_mark", None), getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or ""
    context = getattr(exc, "context", None) or ""
    # Where the mistake is: where the parser found it (a line indented out of place), but where a key was
    # being scanned (a missing colon) or the file ended (a bracket never closed), where that began.
    at_context = context_mark is not None and ("<stream end>" in problem or context.startswith("while scanning"))
    mark = context_mark if at_context else problem_mark or context_mark
    if "expected <block end>" in problem:
        problem = f"this line is indented other than the lines around it ({problem})"
    if context and context_mark is not None and mark is not None and context_mark.line < mark.line:
        problem += f", {context} that begins on line {context_mark.line + 1}"
    elif context:
        problem += f" ({context})"
    at = f"line {mark.line + 1}: " if mark else ""
    return f"{at}not valid YAML: {problem or exc}"
