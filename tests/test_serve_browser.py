"""`serve` in a real browser (headless Chromium, driven through the DevTools protocol): a run's page
updates itself while `autodiscovery run` writes the database, without a reload; a candidate's page
shows hostile text as text and runs none of it; the tree's links lead to candidates. Set
AUTODISCOVERY_SHOTS=DIR to keep a screenshot of each page there."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from browser import Browser, chromium
from serving import served

from autodiscovery.store import Candidate, Store, StoreError

HERE = Path(__file__).parent
DATA = HERE / "data"
PWN = '<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>'


@pytest.fixture(scope="module")
def browser():
    found = chromium()
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing on CI: .ci/run installs Debian's chromium")
        pytest.skip("chromium is not installed (.ci/run installs it)")
    with Browser(found, 1280, 900) as b:
        yield b


def shot(b: Browser, name: str) -> None:
    if folder := os.environ.get("AUTODISCOVERY_SHOTS"):
        Path(folder).mkdir(parents=True, exist_ok=True)
        b.screenshot(Path(folder) / f"{name}.png")


def toy_campaign(tmp_path: Path) -> Path:
    """The toy harness, slowed down (a million items, sixty timed calls) so a run lasts a few seconds."""
    path = tmp_path / "toy.yaml"
    path.write_text(
        "name: toy-sum\n"
        "description: a Python function summing a list, timed\n"
        "harness: {name: 'toy_harness:ToyHarness', repeats: 60, length: 1000000}\n"
        f"seed: {HERE / 'toy_harness.py'}\n"
        "agent: {kind: 'toy_harness:ToyAgent'}\n"
        "budget: {candidates: 8, minutes: 5}\n"
        "stop: {patience: 10, min_gain: 0.05}\n")
    return path


def wait_for_run(db: Path, proc: subprocess.Popen, timeout: float = 120) -> None:
    """Until the run's database holds run 1 (the run may still be creating it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read()
        if db.exists():
            try:
                with Store(db, create=False, read_only=True).session() as s:
                    if s.get(Candidate, 1) is not None:
                        return
            except StoreError:
                pass
        time.sleep(0.1)
    raise TimeoutError("the run recorded nothing")


@pytest.mark.long
def test_a_run_page_updates_while_the_run_writes_without_a_reload(browser, tmp_path):
    db = tmp_path / "toy.db"
    proc = subprocess.Popen([sys.executable, "-m", "autodiscovery", "--db", str(db), "run", "--campaign",
                             str(toy_campaign(tmp_path)), "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=os.environ | {"PYTHONPATH": str(HERE)})
    try:
        wait_for_run(db, proc)
        with served(db, poll_s=0.3) as base:
            browser.open(f"{base}/runs/1")
            browser.js("window.loadedOnce = true")
            first = browser.js("[document.querySelectorAll('#candidates tbody tr').length, "
                               "document.getElementById('live').textContent]")
            assert "running" in first[1]
            shot(browser, "run-live")
            changed = browser.wait_for(
                f"document.querySelectorAll('#candidates tbody tr').length > {first[0]} "
                "&& Number(document.body.dataset.updates || 0) >= 1", timeout=120)
            assert changed
            shot(browser, "run-live-later")
            assert proc.wait(120) == 0, proc.stdout.read()
            browser.wait_for("document.getElementById('live').textContent.includes('finished')", timeout=60)
            assert browser.js("window.loadedOnce === true && performance.getEntriesByType('navigation').length === 1")
            kept = browser.js("document.querySelectorAll('#chart-progress #kept use').length")
            assert kept >= 1  # the progress chart was drawn again, with the kept candidates
            rows = browser.js("document.querySelectorAll('#candidates tbody tr').length")
            with Store(db, create=False, read_only=True).session() as s:
                assert rows == s.query(Candidate).count()
            assert browser.errors(base) == []
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(30)


@pytest.fixture()
def recorded(tmp_path) -> Path:
    path = tmp_path / "h100_run.db"
    shutil.copy(DATA / "h100_run.db", path)
    with Store(path).session() as s:
        Candidate.by_seq(s, 1, 6).hypothesis = f"Clusters of two {PWN}"
        from autodiscovery.store import LlmCall

        c6 = Candidate.by_seq(s, 1, 6)
        s.add(LlmCall(run_id=1, candidate_id=c6.id, model="scripted-model",
                      prompt=json.dumps([{"role": "system", "content": "You tune kernels."},
                                         {"role": "user", "content": f"Make it faster. {PWN}"}]),
                      reply=f"HYPOTHESIS: clusters of two {PWN}", input_tokens=900, output_tokens=120,
                      cost=0.004, latency_ms=1800.0))
    return path


def test_a_candidate_page_shows_hostile_text_as_text_and_runs_none_of_it(browser, recorded):
    with served(recorded) as base:
        browser.open(f"{base}/runs/1/candidates/6")
        assert PWN in browser.js("document.getElementById('hypothesis').textContent")
        assert browser.js("window.pwned") is None
        assert browser.js("document.querySelectorAll('#diff-parent .add').length") > 0
        assert browser.js("document.querySelectorAll('#source .highlight, #source .k, #source .kt').length") > 0
        assert browser.js("document.querySelectorAll('details.llm .message').length") == 3  # two sent, one reply
        assert PWN in browser.js("document.querySelector('details.llm .reply').textContent")
        shot(browser, "candidate")
        assert browser.errors(base) == []


def test_the_tree_leads_to_each_candidate(browser, recorded):
    with served(recorded) as base:
        browser.open(f"{base}/runs/1/tree")
        assert browser.js("document.querySelectorAll('#tree .node').length") == 29
        shot(browser, "tree")
        target = browser.js("document.querySelector('#tree .node.chain:last-of-type a, #tree .node.chain a').href")
        browser.open(target)
        assert browser.js("location.pathname").startswith("/runs/1/candidates/")
        assert browser.js("document.querySelector('h1').textContent").startswith("Run 1, candidate #")
        browser.open(f"{base}/")
        shot(browser, "runs")
        assert browser.js("document.querySelectorAll('#runs tbody tr').length") == 1
        assert browser.errors(base) == []
