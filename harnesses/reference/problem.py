"""A problem file in KernelBench's format, read as text (the parent process imports no PyTorch).

What can be known without running it is read from its syntax: that it parses, that it defines
`class Model` with a `forward`, `get_inputs()` and `get_init_inputs()`, its module-level integer sizes
and the names of `forward`'s inputs. What only running it tells (the inputs' shapes and dtypes, the
parameters, the outputs, the work it does) comes from the probe the evaluation child makes
(`worker.probe`), stored with the run's fingerprint.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from autodiscovery import ROOT, AutoDiscoveryError


class ProblemError(AutoDiscoveryError):
    pass


PROBLEM_FAILED = "problem"
"""The status of an evaluation child's result where the problem itself failed (importing it, building
its model, running it), not a candidate: preflight says so in the problem's words, an evaluation
records it as crashed."""


def resolve(file: str) -> Path:
    """The problem file: absolute, or relative to the project (a campaign's `problem.file` relative to its
    own folder is made absolute when the campaign is loaded)."""
    p = Path(file).expanduser()
    path = p if p.is_absolute() else ROOT / p
    if not path.is_file():
        raise ProblemError(f"problem file not found: {file}" + ("" if p.is_absolute() else f" (looked for {path})"))
    return path


@dataclass
class Static:
    """What a problem file says without running it."""

    path: Path
    source: str
    sizes: dict[str, int]
    """Module-level integer constants (the sizes `get_inputs()` reads), with the campaign's overrides."""
    inputs: list[str] = field(default_factory=list)
    """`Model.forward`'s parameters, in order (its inputs' names)."""


def read(file: str, overrides: dict[str, int] | None = None) -> Static:
    """Read and check a problem file's shape; ProblemError names the file and what is wrong."""
    path = resolve(file)
    name = path.name
    try:
        source = path.read_text()
        tree = ast.parse(source, filename=name)
    except (OSError, UnicodeDecodeError) as exc:
        raise ProblemError(f"{name}: cannot be read: {exc}") from None
    except SyntaxError as exc:
        raise ProblemError(f"{name}: line {exc.lineno}: not valid Python: {exc.msg}") from None
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    missing = [what for what, ok in (("class Model", model is not None), ("get_inputs()", "get_inputs" in functions),
                                     ("get_init_inputs()", "get_init_inputs" in functions)) if not ok]
    if missing or model is None:
        raise ProblemError(f"{name}: not a problem in KernelBench's format: no {', '.join(missing)}")
    forward = next((n for n in model.body if isinstance(n, ast.FunctionDef) and n.name == "forward"), None)
    if forward is None:
        raise ProblemError(f"{name}: class Model has no forward()")
    args = forward.args
    if args.vararg is not None or args.kwarg is not None:
        inputs = []  # *args: positional names (input0, ...) only
    else:
        inputs = [a.arg for a in [*args.posonlyargs, *args.args][1:]]
    sizes = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and isinstance(node.value, ast.Constant) and type(node.value.value) is int:
            sizes[node.targets[0].id] = node.value.value
    unknown = [k for k in (overrides or {}) if k not in sizes]
    if unknown:
        raise ProblemError(f"{name}: problem.sizes sets {', '.join(unknown)}, which the file does not define "
                           f"at module level (its sizes: {', '.join(sizes) or 'none'})")
    return Static(path, source, sizes | dict(overrides or {}), inputs)
