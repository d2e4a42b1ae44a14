"""How fast `serve` answers (docs/guides/reviewing.md): real uvicorn on a free port, real HTTP, over a
shipped database and over a synthetic run of 2,030 candidates (tests/data/h100_run.db grown as the tests
grow it), each page's first answer and the median of five after it. Writes the figures as JSON.

    python tests/time_serve.py --json docs/serve-timings/llama3-8b-h100.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from serving import grown, request, served  # noqa: E402

from autodiscovery import ROOT, provenance  # noqa: E402
from autodiscovery.store import Candidate, Run, Store  # noqa: E402

AGAIN = 5


def timed(url: str) -> float:
    start = time.perf_counter()
    reply = request(url)
    took = time.perf_counter() - start
    if reply.status != 200:
        raise SystemExit(f"error: {url} answered {reply.status}")
    return took


def pages(base: str, paths: dict[str, str]) -> dict[str, dict[str, float]]:
    """Each page's first answer and the median of AGAIN after it, in seconds."""
    out = {}
    for name, path in paths.items():
        first = timed(base + path)
        out[name] = {"first_s": first, "again_s": statistics.median(timed(base + path) for _ in range(AGAIN))}
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", default="docs/llama3-8b-h100/run.db", help="a shipped database (from the project's root)")
    ap.add_argument("--json", type=Path, required=True, help="where to write the figures")
    args = ap.parse_args(argv)
    shipped = ROOT / args.db
    store = Store(shipped, create=False, read_only=True)
    with store.session() as s:
        runs = s.query(Run).count()
        candidates = s.query(Candidate).count()
        biggest = max(s.query(Run).all(), key=lambda r: len(r.candidates))
        run_id, size, seq = biggest.id, len(biggest.candidates), max(c.seq for c in biggest.candidates)
    store.engine.dispose()
    with served(shipped) as base:
        real = pages(base, {"runs": "/", "run": f"/runs/{run_id}", "candidate": f"/runs/{run_id}/candidates/{seq}"})
    with tempfile.TemporaryDirectory() as tmp:
        synthetic = Path(tmp) / "grown.db"
        shutil.copy(Path(__file__).parent / "data" / "h100_run.db", synthetic)
        grown(synthetic, copies=70, runs=200)
        with served(synthetic) as base:
            big = pages(base, {"run": "/runs/2", "candidate": "/runs/2/candidates/2000"})
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({
        "db": args.db, "runs": runs, "candidates": candidates, "run": run_id,
        "run_candidates": size, "cpus": os.cpu_count(), "code": provenance.code(),
        "pages": real, "synthetic": {"candidates": 2030, "pages": big}}, indent=1) + "\n")
    for name, got in [*real.items(), *(("synthetic " + k, v) for k, v in big.items())]:
        print(f"{name:20} first {got['first_s'] * 1e3:8.1f} ms   again {got['again_s'] * 1e3:8.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
