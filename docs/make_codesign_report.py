"""Rebuild the recorded 512³ co-design run (tests/data/edge_512_run.json: every simulated configuration,
in order, with its GPGPU-Sim cycles) into a run database, and write its report.

    python docs/make_codesign_report.py docs/codesign-512.db --out docs/codesign-512.html --png docs/codesign-512

The loop decides keep or revert exactly as it did; the cycles are the recorded ones (no simulator needed).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from replay import SimReplay  # noqa: E402

from autodiscovery import campaign as campaigns, html_report  # noqa: E402
from autodiscovery.loop import Loop  # noqa: E402
from autodiscovery.store import Store  # noqa: E402
from harnesses.accelsim.agent import CodesignAgent  # noqa: E402


class Recorded(CodesignAgent):
    """Proposes the recorded configurations in their recorded order, with their phases."""

    def __init__(self, campaign, results: list[dict]) -> None:
        super().__init__(campaign)
        self.results = results

    def seed_proposal(self, campaign=None):
        r = self.results[0]
        return self.proposal(r["phase"], r["kernel"], r["arch"], "the recorded baseline")

    def propose(self, history, n):
        done = len(history.records)
        return [self.proposal(r["phase"], r["kernel"], r["arch"], "as recorded")
                for r in self.results[done:done + n]]


def main() -> None:
    db, out, png = Path(sys.argv[1]), Path(sys.argv[sys.argv.index("--out") + 1]), Path(sys.argv[sys.argv.index("--png") + 1])
    data = json.loads((ROOT / "tests" / "data" / "edge_512_run.json").read_text())
    results = sorted(data["results"], key=lambda r: r["seq"])
    recorded = {json.dumps({"kernel": r["kernel"], "arch": r["arch"]}, sort_keys=True): r["cycles"] for r in results}
    c = campaigns.load("edge-codesign", [f"budget.candidates={len(results)}", "harness.parallel=1", "stop.patience=1000"])
    db.unlink(missing_ok=True)
    store = Store(db)
    Loop(c, store, SimReplay(recorded=recorded, parallel=1), Recorded(c, results), workers=1).start(
        {"gpu": "simulated", "simulator": data["source"]})
    page, pngs = html_report.render(store, 1, png)
    out.write_text(page)
    print(f"wrote {out} and {len(pngs)} charts")


if __name__ == "__main__":
    main()
