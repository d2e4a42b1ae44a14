"""How the modules import each other, read from their source: no cycle among the package's and the
harnesses' modules, and the core never imports a harness (the registry finds them by name)."""

from __future__ import annotations

import ast
from pathlib import Path

from autodiscovery import ROOT

PACKAGES = ("autodiscovery", "harnesses")


def modules() -> dict[str, Path]:
    found = {}
    for pkg in PACKAGES:
        for f in (ROOT / pkg).rglob("*.py"):
            found[".".join(f.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")] = f
    return found


def imported(name: str, path: Path, known: set[str]) -> set[str]:
    """The known modules `name` imports when it is imported: its top-level imports (those under `if
    TYPE_CHECKING:` and inside functions are not run then), `from pkg import mod` naming a module."""
    out: set[str] = set()
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                visit(node.orelse)
            elif isinstance(node, ast.If | ast.Try | ast.With):
                for part in ("body", "orelse", "finalbody"):
                    visit(getattr(node, part, []))
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)
            elif isinstance(node, ast.Import):
                out.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(package[:len(package) - node.level + 1] + [node.module or ""]).strip(".") \
                    if node.level else node.module or ""
                out.add(base)
                out.update(f"{base}.{a.name}" for a in node.names)

    visit(ast.parse(path.read_text()).body)
    return {m for m in out if m in known and m != name}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = stack[stack.index(v):]
            del stack[stack.index(v):]
            if len(part) > 1:
                found.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return found


def graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imported(name, path, set(found)) for name, path in found.items()}


def test_no_module_imports_itself_round_a_cycle():
    g = graph()
    assert len(g) > 100 and g["autodiscovery.running.driver"] >= {"autodiscovery.running.schedule"}
    assert cycles(g) == []


def test_the_cycle_finder_finds_one():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_core_imports_no_harness():
    """Anywhere in it, in a function too: the registry names harnesses as strings."""
    up = []
    for name, path in modules().items():
        if name.startswith("autodiscovery"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                up += [f"{name} imports {n}" for n in names if n.split(".")[0] == "harnesses"]
    assert up == []


def test_no_module_is_over_400_lines():
    """A module a reader holds in mind at once: the package's and the harnesses' stay at 400 lines or fewer."""
    long = {name: n for name, path in modules().items() if (n := len(path.read_text().splitlines())) > 400}
    assert long == {}


def test_casts_are_few_and_each_says_why():
    """`typing.cast` is for what the type checker cannot know (a library's loose types), not for reaching a
    role a harness may not play: at most five in the package and the harnesses, each with a comment on the
    line above saying why."""
    found = []
    for name, path in modules().items():
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "cast":
                above = lines[node.lineno - 2].strip()
                found.append((name, node.lineno, above.startswith("#")))
    assert len(found) <= 5, found
    assert all(said for _, _, said in found), [f for f in found if not f[2]]
