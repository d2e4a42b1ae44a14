"""A Triton candidate is device code only, as a CUDA one is: a Python file is run as it is, with the whole
host at its reach, so it is read before anything imports it and refused in one line where any statement,
import or name could reach past the GPU.

What a Triton candidate may hold:

- imports of `triton`, `triton.language` (as `tl`, say) and `math`, and of names from them (and of
  libdevice from `triton.language.extra.cuda`);
- functions decorated `@triton.jit` (its keyword arguments literals), whose bodies use their parameters,
  their own locals, the module's constants, the other jitted functions, `triton`, `tl`, `math` and a few
  builtins (`range`, `min`, `max`, `abs`, `int`, `float`, `bool`, `len`), in assignments, loops, branches,
  returns, asserts and calls;
- module-level constants: a name bound to a literal, or to `tl.constexpr(literal)`;
- the module's docstring.

Anything else is refused: another import (os, torch, subprocess...), a statement that runs at import time
(a call, a loop, a class), a function that is not jitted, a name outside the list (open, eval, exec,
globals, getattr, __import__, ...), a double-underscore attribute (`().__class__`), and the parts of
`triton` that reach the host (`triton.runtime`, `triton.compiler`, `triton.testing`, `triton.tools`). The
harness imports the file and launches its kernels itself, in the evaluation child.
"""

from __future__ import annotations

import ast
import importlib.util
from types import ModuleType

from autodiscovery import AutoDiscoveryError

MODULES = {"triton", "triton.language", "math"}
"""What a Triton candidate may import (and import names from)."""
BUILTINS = {"range", "min", "max", "abs", "int", "float", "bool", "len", "True", "False", "None"}
"""Builtins a jitted body may name (Triton compiles them, or evaluates them on constants)."""
HOST_PARTS = {"runtime", "compiler", "testing", "tools", "backends", "knobs", "profiler"}
"""Attributes of `triton` that reach the host: its driver, compiler, benchmarking and tooling."""
DEEPER = {"triton.language.math", "triton.language.extra.cuda.libdevice", "triton.language.extra.libdevice"}
"""The namespaces under triton.language whose functions a body may name (nothing else deeper: a module's
own imports, os among them, are attributes of it too)."""
STATEMENTS = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For, ast.While, ast.If, ast.Return, ast.Expr, ast.Pass,
              ast.Assert, ast.Break, ast.Continue)
"""What a jitted body may be made of."""


class RefusedTriton(AutoDiscoveryError):
    """A Triton candidate that is not device code only: the line, and what it is."""


def load(path: str, label: str = "the Triton candidate") -> ModuleType:
    """The file at `path` imported as a module, only after the rule has read it (RefusedTriton else)."""
    with open(path) as f:
        check(f.read(), label)
    spec = importlib.util.spec_from_file_location("autodiscovery_triton_candidate", path)
    if spec is None or spec.loader is None:
        raise RefusedTriton(f"{label}: {path} cannot be imported")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check(source: str, label: str = "candidate") -> list[str]:
    """The names of the source's jitted kernels; RefusedTriton, naming the line and what is refused,
    where the file holds anything else."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise RefusedTriton(f"{label}: line {exc.lineno}: not valid Python: {exc.msg}") from None
    rule = _Rule(label)
    return rule.module(tree)


class _Rule:
    def __init__(self, label: str) -> None:
        self.label = label
        self.aliases: dict[str, str] = {}
        """Module-level names bound by imports, to what they are: 'tl' -> 'triton.language'."""
        self.constants: set[str] = set()
        self.kernels: list[str] = []

    def refuse(self, node: ast.AST, what: str) -> RefusedTriton:
        line = getattr(node, "lineno", 0)
        return RefusedTriton(f"{self.label}: line {line}: {what}: a Triton candidate is device code only "
                             "(imports of triton, triton.language and math; @triton.jit functions; constants)")

    # ---- the module -------------------------------------------------------------------------
    def module(self, tree: ast.Module) -> list[str]:
        body = tree.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            body = body[1:]  # the docstring
        functions = []
        for node in body:
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name not in MODULES:
                        raise self.refuse(node, f"import {a.name}")
                    if a.asname:
                        self.aliases[a.asname] = a.name
                    else:
                        self.aliases[a.name.split(".")[0]] = a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom):
                if node.level or node.module not in MODULES | {"triton.language.extra", "triton.language.extra.cuda"}:
                    raise self.refuse(node, f"from {'.' * node.level}{node.module or ''} import ...")
                for a in node.names:
                    if a.name == "*":
                        raise self.refuse(node, f"from {node.module} import *")
                    full = f"{node.module}.{a.name}"
                    if a.name.startswith("_") or a.name in HOST_PARTS:
                        raise self.refuse(node, f"from {node.module} import {a.name}")
                    self.aliases[a.asname or a.name] = full
            elif isinstance(node, ast.FunctionDef):
                functions.append(node)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)) and self._constant(node):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                self.constants |= {t.id for t in targets if isinstance(t, ast.Name)}
            else:
                raise self.refuse(node, f"{_what(node)} at module level (it would run when the file is imported)")
        names = {f.name for f in functions}
        for f in sorted(functions, key=lambda f: not f.decorator_list):  # a kernel's own decorators say most
            self._jitted(f)
        for f in functions:
            self._body(f, names)
        if not functions:
            raise RefusedTriton(f"{self.label}: no @triton.jit function: nothing to launch")
        return [f.name for f in functions]

    def _constant(self, node: ast.Assign | ast.AnnAssign) -> bool:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if not all(isinstance(t, ast.Name) and not t.id.startswith("_") for t in targets):
            return False
        value = node.value
        if isinstance(node, ast.AnnAssign) and not self._annotation(node.annotation):
            return False
        if isinstance(value, ast.Call) and self._dotted(value.func) in ("triton.language.constexpr",) \
                and len(value.args) == 1 and not value.keywords:
            value = value.args[0]
        return value is not None and _literal(value)

    def _annotation(self, node: ast.AST) -> bool:
        return self._dotted(node) == "triton.language.constexpr" or (isinstance(node, ast.Name) and node.id in
                                                                     ("int", "float", "bool"))

    def _jitted(self, f: ast.FunctionDef) -> None:
        jit = [d for d in f.decorator_list
               if self._dotted(d.func if isinstance(d, ast.Call) else d) in ("triton.jit", "triton.runtime.jit.jit")]
        if others := [d for d in f.decorator_list if d not in jit]:  # a wrapper would run as Python, on the host
            raise self.refuse(others[0], f"@{ast.unparse(others[0])} on {f.name}: a kernel is decorated @triton.jit "
                                         "and nothing else")
        if len(jit) != 1:
            raise self.refuse(f, f"def {f.name} is not decorated @triton.jit (and nothing else)")
        d = jit[0]
        if isinstance(d, ast.Call) and (d.args or not all(kw.arg and _literal(kw.value) for kw in d.keywords)):
            raise self.refuse(d, f"@triton.jit(...) on {f.name} takes literal keyword arguments only")
        for default in [*f.args.defaults, *f.args.kw_defaults]:
            if default is not None and not _literal(default):
                raise self.refuse(default, f"a default of {f.name}'s parameters that is not a literal")
        for a in [*f.args.posonlyargs, *f.args.args, *f.args.kwonlyargs]:
            if a.annotation is not None and not self._annotation(a.annotation):
                raise self.refuse(a, f"parameter {a.arg} of {f.name} annotated other than tl.constexpr")
        if f.args.vararg or f.args.kwarg:
            raise self.refuse(f, f"*args or **kwargs in {f.name}")

    # ---- a jitted body ----------------------------------------------------------------------
    def _body(self, f: ast.FunctionDef, functions: set[str]) -> None:
        params = {a.arg for a in [*f.args.posonlyargs, *f.args.args, *f.args.kwonlyargs]}
        local = set(params)
        for node in ast.walk(f):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                local.add(node.id)
        allowed = local | functions | self.constants | set(self.aliases) | BUILTINS
        inner = {id(n.value) for n in ast.walk(f) if isinstance(n, ast.Attribute)}
        """Nodes that are the left side of an attribute: `tl` in `tl.load`, `tl.math` in `tl.math.exp`."""
        decorators = {id(n) for d in f.decorator_list for n in ast.walk(d)}
        for stmt in ast.walk(f):
            if isinstance(stmt, ast.Name) and stmt.id in self.aliases and id(stmt) not in inner \
                    and id(stmt) not in decorators:
                raise self.refuse(stmt, f"{f.name} uses the module '{stmt.id}' as a value")
            if stmt is f:
                continue
            if isinstance(stmt, ast.stmt) and not isinstance(stmt, STATEMENTS):
                raise self.refuse(stmt, f"{_what(stmt)} in {f.name}")
            if isinstance(stmt, (ast.Lambda, ast.GeneratorExp, ast.ListComp, ast.SetComp, ast.DictComp, ast.Await,
                                 ast.Yield, ast.YieldFrom, ast.NamedExpr, ast.Starred)):
                raise self.refuse(stmt, f"{_what(stmt)} in {f.name}")
            if isinstance(stmt, ast.Name) and stmt.id not in allowed:
                raise self.refuse(stmt, f"{f.name} names '{stmt.id}', which is not device code")
            if isinstance(stmt, ast.Name) and stmt.id.startswith("__"):
                raise self.refuse(stmt, f"{f.name} names '{stmt.id}'")
            if isinstance(stmt, ast.Attribute):
                if stmt.attr.startswith("_"):
                    raise self.refuse(stmt, f"attribute '{stmt.attr}' in {f.name}")
                if id(stmt) in inner:
                    continue  # checked as part of the longer chain
                dotted = self._dotted(stmt)
                if dotted is not None and not _reachable(dotted):
                    raise self.refuse(stmt, f"{dotted} in {f.name}: not a device function of triton, "
                                            "triton.language or math")

    def _dotted(self, node: ast.AST) -> str | None:
        """'triton.language.load' for `tl.load` where `tl` is imported as triton.language; None where the
        expression does not start at an imported name."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id not in self.aliases:
            return None
        return ".".join([self.aliases[node.id], *reversed(parts)])


def _reachable(dotted: str) -> bool:
    """Whether a body may name `dotted` (an imported name and its attributes, resolved)."""
    if dotted in ("triton.jit", "triton.cdiv", "triton.next_power_of_2"):
        return True
    head, _, name = dotted.rpartition(".")
    return head in ("triton.language", "math", *DEEPER) or dotted in DEEPER or dotted in (
        "triton.language.extra", "triton.language.extra.cuda")


def _literal(node: ast.AST) -> bool:
    """A number, string, bool or None, maybe negated, or a tuple of them."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float, str, bool)) or node.value is None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return _literal(node.operand)
    if isinstance(node, ast.Tuple):
        return all(_literal(e) for e in node.elts)
    return False


def _what(node: ast.AST) -> str:
    """A statement or expression named as a reader would: 'a call to open', 'a class', 'a with block'."""
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        func = node.value.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else "a value"
        return f"a call to {name}"
    names = {ast.ClassDef: "a class", ast.With: "a with block", ast.Try: "a try block", ast.Global: "a global",
             ast.Nonlocal: "a nonlocal", ast.Import: "an import", ast.ImportFrom: "an import", ast.Raise: "a raise",
             ast.Delete: "a del", ast.Lambda: "a lambda", ast.AsyncFunctionDef: "an async function",
             ast.FunctionDef: "a nested function"}
    for kind, name in names.items():
        if isinstance(node, kind):
            return name
    return f"a {type(node).__name__.lower()} statement" if isinstance(node, ast.stmt) else \
        f"a {type(node).__name__.lower()} expression"
