"""The type checker over the package and the harnesses, as pyproject.toml's [tool.mypy] configures it: no
finding outside the modules listed as still to fix, and no module on that list that is already clean (the
list only shrinks)."""

from __future__ import annotations

import re
import tomllib

import pytest

from autodiscovery import ROOT

api = pytest.importorskip("mypy.api", reason="mypy is not installed (pip install -e '.[test]')")


def test_the_type_checker_finds_nothing_outside_the_list_and_the_list_holds_only_what_it_must(tmp_path):
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    (unfinished,) = [o for o in config["overrides"] if o.get("ignore_errors")]
    listed = set(unfinished["module"])
    # Every module's findings, the list's included: the configuration with its overrides left out.
    bare = tmp_path / "mypy.ini"
    bare.write_text(f"[mypy]\nplugins = {', '.join(config['plugins'])}\n")
    flags = ["--python-version", config["python_version"], "--ignore-missing-imports", "--no-error-summary",
             "--show-error-codes", "--config-file", str(bare), *config["files"]]
    out, err, _ = api.run(flags)
    assert not err.strip(), err
    found: dict[str, list[str]] = {}
    for line in out.splitlines():
        m = re.match(r"^(\S+?)\.py:\d+: error: ", line)
        if m:
            module = m.group(1).replace("/", ".").removesuffix(".__init__")
            found.setdefault(module, []).append(line)
    outside = {m: lines[:3] for m, lines in found.items() if m not in listed}
    assert not outside, f"type errors outside [tool.mypy]'s list of modules still to fix: {outside}"
    clean = sorted(listed - set(found))
    assert not clean, f"clean now: take {', '.join(clean)} off [tool.mypy]'s list in pyproject.toml"
