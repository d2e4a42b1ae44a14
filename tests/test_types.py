"""The type checker over the package and the harnesses, as pyproject.toml's [tool.mypy] configures it: no
finding, and no module whose findings are left uncounted."""

from __future__ import annotations

import tomllib

import pytest

from autodiscovery import ROOT

api = pytest.importorskip("mypy.api", reason="mypy is not installed (pip install -e '.[test]')")


@pytest.mark.long
def test_the_type_checker_finds_nothing_in_the_package_and_the_harnesses():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert set(config["files"]) == {"autodiscovery", "harnesses"}
    silenced = [o["module"] for o in config.get("overrides", []) if o.get("ignore_errors")]
    assert not silenced, f"[tool.mypy] leaves findings uncounted in {silenced}"
    out, err, status = api.run(["--config-file", str(ROOT / "pyproject.toml"), "--no-error-summary",
                                *(str(ROOT / f) for f in config["files"])])
    assert not err.strip(), err
    assert status == 0 and not out.strip(), out[:2000]


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
