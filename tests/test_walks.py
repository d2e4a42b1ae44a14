"""The own-op walks of the guide and the README, run as they stand: their blocks written into an empty
folder outside the project (each file under the name the text before it gives), their commands run
(`check`, and `run --dry-run` where `run` needs a GPU), with what the guide says they print."""

from __future__ import annotations

import importlib.util
import re
import shlex
from pathlib import Path

import pytest
from conftest import needs_nvcc
from typer.testing import CliRunner

from autodiscovery import ROOT
from autodiscovery.cli import app

GUIDE = ROOT / "docs" / "guides" / "own-op.md"
README = ROOT / "README.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
NAMED = re.compile(r"`([\w./-]+\.(?:py|cu|yaml|j2))`")
HEADER = re.compile(r"^#\s*([\w./-]+\.(?:py|cu|yaml|j2))\s*$")  # a block's first line naming its file


def blocks(text: str) -> list[tuple[str, str, str]]:
    """(language, body, the text before it since the last block) of every fenced block."""
    out, last = [], 0
    for m in FENCE.finditer(text):
        out.append((m.group(1), m.group(2), text[last:m.start()]))
        last = m.end()
    return out


def section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start:end if end != -1 else None]


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def the_guides_first_op(folder: Path) -> list[tuple[list[str], str]]:
    """The guide's first op written into `folder` as the guide lays it out; the commands it shows (`$ ...`)
    with what it says they print."""
    commands = []
    for lang, body, before in blocks(section(GUIDE.read_text(), "## Your first op, from an empty folder")):
        if lang == "" and body.startswith("$ autodiscovery "):
            first, *printed = body.splitlines()
            commands.append((shlex.split(first.removeprefix("$ autodiscovery ")), "\n".join(printed)))
            continue
        named = NAMED.findall(before) + HEADER.findall(body.splitlines()[0])
        if lang == "yaml" and "a line added to `leaky.yaml`" in before:
            commands.append((["<add>"], body))
        elif lang in ("python", "c", "yaml") and named:
            path = folder / named[-1]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(body)
    return commands


@needs_nvcc
def test_the_guides_first_op_runs_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cache = f"harness.cache_dir={tmp_path / 'cache'}"
    commands = the_guides_first_op(tmp_path)
    assert {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()} == {
        "problems/leaky.py", "kernels/leaky.cu", "leaky.yaml", "kernels/families.yaml", "kernels/leaky_vec.cu.j2"}
    # the campaign before its space is named: the seed alone
    res = invoke("--db", "seed.db", "run", "--campaign", "leaky.yaml", "--dry-run", "--quiet", "--set", cache)
    assert res.exit_code == 0 and "1 candidate built" in res.output, res.output
    (check, says), (add, line), (dry, prints) = commands
    res = invoke(*check, "--set", cache)
    assert res.exit_code == 0, res.output
    shown = [" ".join(r.split()[:2]) for r in says.splitlines() if r.strip().startswith(("ok", "FAIL", "note"))]
    got = [" ".join(r.split()[:2]) for r in res.output.splitlines() if r.strip().startswith(("ok", "FAIL", "note"))]
    if importlib.util.find_spec("torch") is None:  # the guide shows a machine with PyTorch: the module checked
        assert "outputs not checked: PyTorch is not installed here (pip install torch)" in " ".join(res.output.split())
        got = [g.replace("note module:", "ok module:") for g in got]
    assert got == shown and "ready for a GPU" in res.output
    assert add == ["<add>"]
    with open("leaky.yaml", "a") as f:
        f.write(line)
    res = invoke(*dry, "--set", cache)
    assert res.exit_code == 0, res.output
    assert "5 candidates built" in res.output and "5 candidates built" in prints


@needs_nvcc
def test_the_readmes_own_op_runs_as_written_beside_the_guides_files(tmp_path, monkeypatch):
    """The README's campaign and seed, in the guide's folder (the README names the guide for the rest),
    checked and dry-run by the README's own commands."""
    monkeypatch.chdir(tmp_path)
    cache = f"harness.cache_dir={tmp_path / 'cache'}"
    the_guides_first_op(tmp_path)
    own = section(README.read_text(), "## Your own op")
    (yaml_lang, campaign, _), (c_lang, seed, _), (sh, commands, _) = blocks(own)
    assert (yaml_lang, c_lang, sh) == ("yaml", "c", "bash")
    (tmp_path / "leaky.yaml").write_text(campaign)
    (tmp_path / "kernels" / "leaky.cu").write_text(seed)
    lines = [shlex.split(r.split("#")[0]) for r in commands.splitlines() if r.strip()]
    assert [r[:2] for r in lines] == [["autodiscovery", "check"], ["autodiscovery", "run"], ["autodiscovery", "measure"]]
    res = invoke(*lines[0][1:], "--set", cache)
    assert res.exit_code == 0 and "ready for a GPU" in res.output, res.output
    res = invoke("--db", "r.db", *lines[1][1:], "--dry-run", "--quiet", "--set", cache)
    assert res.exit_code == 0 and "1 candidate built" in res.output, res.output


@pytest.mark.parametrize("doc", [GUIDE, README])
def test_the_walks_blocks_are_found(doc):
    assert len(blocks(doc.read_text())) >= 3
