"""The documentation: the README stays a front door, the generated reference pages match the code, and the
site builds with no warning."""

import importlib.util
import os
import re
import subprocess
import sys

import pytest
import yaml

from autodiscovery import ROOT, docgen

README = (ROOT / "README.md").read_text()


def test_readme_is_a_front_door():
    assert len(README.splitlines()) <= 200, "the README is a front door: findings and procedures go in docs/"
    setup = "python3 -m venv .venv && . .venv/bin/activate && "
    assert setup + "pip install -e . && autodiscovery run --campaign hopper-gemm" in README
    assert setup + "pip install -e '.[test]' && python -m pytest -q -n auto" in README


def test_readme_links_and_examples_hold():
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README):
        if not target.startswith("http"):
            assert (ROOT / target).is_file(), f"the README links to {target}, which is not there"
    from harnesses.reference.manifest import parse

    yaml_blocks = re.findall(r"```yaml\n(.*?)```", README, re.S)
    assert yaml_blocks and all(isinstance(yaml.safe_load(b), dict) for b in yaml_blocks)
    for block in re.findall(r"```c\n(.*?)```", README, re.S):
        parse(block)


@pytest.mark.parametrize("name", ["cli.md", "campaign.md", "manifests.md"])
def test_generated_page_is_current(name):
    path = docgen.REFERENCE / name
    rendered = docgen.pages()[path]
    committed = path.read_text() if path.is_file() else ""
    assert committed == rendered, f"docs/reference/{name} is stale: run `{docgen.COMMAND}` and commit it"


def test_rendering_is_deterministic():
    assert docgen.pages() == docgen.pages()


def test_every_command_and_field_is_documented():
    pages = docgen.pages()
    cli, campaign = pages[docgen.REFERENCE / "cli.md"], pages[docgen.REFERENCE / "campaign.md"]
    for command in ("run", "runs", "show", "lineage", "report", "replay", "export", "diff", "doctor"):
        assert f"## `{command}`" in cli
    for field in ("`candidates`", "`patience_below`", "`screen_slack`", "`model_trust`", "`api_key_env`"):
        assert field in campaign


def test_check_names_a_stale_page(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(docgen, "REFERENCE", tmp_path)
    monkeypatch.setattr(docgen, "RESULTS", tmp_path)  # no results page here: none of the project's is written
    assert docgen.main(["--check"]) == 1
    assert f"run `{docgen.COMMAND}`" in capsys.readouterr().out
    assert docgen.main([]) == 0 and docgen.main(["--check"]) == 0


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None, reason="mkdocs is an extra: pip install -e '.[docs]'")
def test_a_results_table_is_rendered_from_the_database_it_names(tmp_path, monkeypatch, capsys):
    """A table between a page's markers is the database's, whatever was written there: a figure edited
    by hand (0.985 made 1.001) makes the page stale, and rendering reads the database without a write."""
    db = ROOT / "docs" / "gemm-sweep-h200" / "trial-seed100.db"
    before = db.read_bytes()
    page = tmp_path / "sweep.md"
    marker = "<!-- suite: docs/gemm-sweep-h200/trial-seed100.db run 1 -->\n"
    page.write_text(f"# A page\n\n{marker}| old | table |\n<!-- end -->\n\ntext after\n")
    monkeypatch.setattr(docgen, "RESULTS", tmp_path)
    monkeypatch.setattr(docgen, "REFERENCE", tmp_path / "reference")
    assert docgen.main([]) == 0
    text = page.read_text()
    assert "| 2 · 2128×10744×3104 | 2128×10744×3104 | 724.8 | 0.985 | 0.996 | wgmma_cluster #14 | 33 | 34 | – |" in text
    assert "Over the 3 problems: median 0.993× best Lt, worst 0.985× best Lt; 1 of 3 at or above" in text
    assert "| old | table |" not in text and text.endswith("<!-- end -->\n\ntext after\n")
    assert docgen.main(["--check"]) == 0
    page.write_text(text.replace("| 0.985 | 0.996 |", "| 1.001 | 0.996 |"))
    assert docgen.main(["--check"]) == 1 and "sweep.md is stale" in capsys.readouterr().out
    assert db.read_bytes() == before and not list(db.parent.glob("*.db-*"))


def test_site_builds_strict(tmp_path):
    """A broken link, a page missing from the navigation or a missing page fails the build."""
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-4000:]
    assert (tmp_path / "site" / "index.html").is_file()
    assert not list((tmp_path / "site").rglob("*.db")), "the databases stay out of the site"


def test_the_walk_from_run_to_a_decision_names_what_the_code_has():
    """The layout page's hops from `autodiscovery run` to a decision: each dotted name is a module and the
    attribute path in it, as the code has them, and there are at most about ten hops."""
    import importlib

    page = (ROOT / "docs" / "architecture" / "layout.md").read_text()
    section = page[page.index("## From `run` to a decision"):page.index("## The documentation")]
    hops = re.findall(r"^\d+\. ", section, re.M)
    assert 5 <= len(hops) <= 10, len(hops)
    names = set(re.findall(r"`(autodiscovery(?:\.\w+)+)`", section))
    assert len(names) >= 12
    for dotted in sorted(names):
        parts = dotted.split(".")
        for i in range(len(parts), 0, -1):  # the longest importable prefix, then attributes
            try:
                obj = importlib.import_module(".".join(parts[:i]))
                break
            except ModuleNotFoundError:
                continue
        for attr in parts[i:]:
            assert hasattr(obj, attr), f"{dotted}: no {attr} in {obj}"
            obj = getattr(obj, attr)
