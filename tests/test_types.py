"""The type checker over the package and the harnesses, as pyproject.toml's [tool.mypy] configures it: no
finding, and no module whose findings are left uncounted."""

from __future__ import annotations

import tomllib

import pytest

from autodiscovery import ROOT

api = pytest.importorskip("mypy.api", reason="mypy is not installed (pip install -e '.[test]')")


def test_the_type_checker_finds_nothing_in_the_package_and_the_harnesses():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert set(config["files"]) == {"autodiscovery", "harnesses"}
    silenced = [o["module"] for o in config.get("overrides", []) if o.get("ignore_errors")]
    assert not silenced, f"[tool.mypy] leaves findings uncounted in {silenced}"
    out, err, status = api.run(["--config-file", str(ROOT / "pyproject.toml"), "--no-error-summary",
                                *(str(ROOT / f) for f in config["files"])])
    assert not err.strip(), err
    assert status == 0 and not out.strip(), out[:2000]
