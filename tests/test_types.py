"""Types: CI's type checker over the package and the harnesses and its linter over those and the tests,
as pyproject.toml configures them, no module's findings left uncounted; every harness the code is given typed."""

from __future__ import annotations

import tomllib

from autodiscovery import ROOT


def test_ci_checks_types_and_lint_before_the_tests_with_nothing_left_uncounted():
    """CI (`.ci/run`) runs mypy over the package and the harnesses and ruff over those and the tests, as
    pyproject.toml configures them, as steps of their own before the tests (a finding fails CI; mypy's cold check of some 3,600
    modules is not repeated inside the test command), and no module's type findings are left uncounted: not
    a module's, nor the bodies of functions written without annotations."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert set(config["files"]) == {"autodiscovery", "harnesses"} and config.get("check_untyped_defs") is True
    assert config.get("disallow_untyped_defs") is True  # every function states its types
    silenced = [o["module"] for o in config.get("overrides", []) if o.get("ignore_errors")]
    assert not silenced, f"[tool.mypy] leaves findings uncounted in {silenced}"
    steps = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    tests = steps.index("python -m pytest -q -n auto")
    assert steps.index("python -m mypy") < tests
    assert steps.index("python -m ruff check autodiscovery harnesses tests") < tests
    assert "set -euo pipefail" in steps  # a step's finding stops CI


def test_every_harness_the_code_is_given_is_typed():
    """A parameter named `harness` says what it is given (the protocol, the base class, a narrow view or
    a harness class): never left bare, never Any."""
    import ast

    loose = []
    for pkg in ("autodiscovery", "harnesses"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    for arg in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]:
                        if arg.arg == "harness" and (arg.annotation is None or ast.unparse(arg.annotation) == "Any"):
                            loose.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert loose == []
