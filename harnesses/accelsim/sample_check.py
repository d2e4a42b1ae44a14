"""The sample against the whole: each point (a kernel on an architecture) simulated whole and in part
(`harness.sample`), side by side on the machine's cores, and the two cycle counts compared.

    python -m harnesses.accelsim.sample_check --size 512 --out docs/codesign-sample/check-512.json

Points: the co-design kernel at tiles of 64x64 and 128x128 with persistent grids of several rounds, and
of one block a tile (P0) where they run in several waves, on the stock architecture and on the 1024³
campaign's best. Needs the simulator (`autodiscovery doctor
--campaign edge-codesign`).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from autodiscovery import campaign as campaigns
from harnesses.accelsim import AccelsimHarness, sample
from harnesses.accelsim.agent import CodesignAgent
from harnesses.accelsim.arch import split

BEST_1024 = {"scheduler": "gto", "l2_rop_latency": 120, "shmem_banks": 64}
"""The architecture the shipped 1024³ campaign found best (docs/codesign-1024-default)."""


def points(agent: CodesignAgent, size: int, least: int = 4, sms: int | None = None,
           knobs: dict | None = None) -> list[tuple[str, dict, dict]]:
    """(label, kernel knobs, architecture) of every point whose grid a sample can represent at this size,
    in `least` rounds (or waves) or more: persistent grids, and grids of one block a tile (P0) sampled by
    their waves; `sms`: on architectures of that many SMs (a small one gives a small problem many waves);
    `knobs`: kernel knobs over the default's (a campaign's winner: its depth of K, stages, blocks an SM)."""
    from harnesses.accelsim.arch import Architecture
    from harnesses.accelsim.sample import resident_blocks

    stock = dict(agent.arch.default) | ({"sms": sms} if sms else {})
    out = []
    for tile, frags in ((64, (2, 2)), (128, (2, 4))):
        tiles = (size // tile) ** 2
        for blocks in (0, 8, 16, 32, 64):
            kernel = dict(agent.kernel.default) | (knobs or {}) | {"BLOCK_M": tile, "BLOCK_N": tile, "FRAGS_M": frags[0],
                                                                   "FRAGS_N": frags[1], "PERSISTENT": blocks}
            for name, arch in (("stock", stock), ("best", stock | BEST_1024)):
                at_once = blocks or resident_blocks(agent.render(kernel, arch), Architecture(**arch), None) or tiles
                if at_once >= tiles or tiles % at_once or tiles // at_once < least:
                    continue
                unit = f"{tiles // at_once} rounds" if blocks else f"{tiles // at_once} waves of {at_once}"
                on = f", {sms} SMs" if sms else ""
                on += "".join(f", {k} {v}" for k, v in (knobs or {}).items())
                out.append((f"{tile}x{tile} P{blocks} ({unit}), {name}{on}", kernel, arch))
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--limit", type=int, default=0, help="at most this many points (0: all)")
    ap.add_argument("--only", default="", help="the points whose label holds this text")
    ap.add_argument("--rounds", type=int, nargs=2, default=[2, 3], help="the two samples, in rounds (R1 < R2)")
    ap.add_argument("--sms", type=int, default=0, help="architectures of this many SMs (0: the stock 32)")
    ap.add_argument("--knobs", type=json.loads, default=None,
                    help='kernel knobs over the default, as JSON (a winner\'s: \'{"BLOCK_K": 16, "STAGES": 2}\')')
    args = ap.parse_args(argv)
    sizes = [f"problem.{k}={args.size}" for k in "MNK"]
    whole = AccelsimHarness(campaigns.load("edge-codesign", sizes))
    r1, r2 = args.rounds
    part = AccelsimHarness(campaigns.load("edge-codesign", [*sizes, f"harness.sample={{rounds: [{r1}, {r2}], min_rounds: {r1 + r2 + 1}}}"]))
    for h in (whole, part):
        h.preflight()
    agent = CodesignAgent(campaigns.load("edge-codesign", sizes))
    chosen: list[tuple[str, dict, dict]] = []
    sources: list[str] = []
    builds: list = []
    for label, kernel, arch in points(agent, args.size, r1 + r2 + 1, args.sms or None, args.knobs):
        if args.only not in label or len(chosen) == (args.limit or -1):
            continue
        source = agent.render(kernel, arch)
        build = whole.build(source)
        program, on = split(source)  # the plan as the harness makes it, with the registers ptxas gave
        planned = sample.plan(program, args.size, args.size, part.s.sample,
                              sample.resident_blocks(program, on, build.registers))
        if not isinstance(planned, sample.Plan):
            continue
        unit = f"{planned.rounds} waves of {planned.blocks}" if planned.waves else f"{planned.rounds} rounds"
        chosen.append((re.sub(r"\([^)]*\)", f"({unit})", label, count=1), kernel, arch))
        sources.append(source)
        builds.append(build)

    with ThreadPoolExecutor(whole.parallel) as pool:  # every simulation of every point side by side
        futures = [(pool.submit(whole.evaluate, src, b), pool.submit(part.evaluate, src, b))
                   for src, b in zip(sources, builds)]
        rows = []
        for (label, _, _), (fa, fb) in zip(chosen, futures):
            a, b = fa.result(), fb.result()
            full, est = a.metrics.get("cycles"), b.metrics.get("cycles")
            row = {"point": label, "whole": full, "sampled": est, "whole_s": a.metrics.get("wall_s"),
                   "sampled_s": b.metrics.get("wall_s"), "status": [a.status, b.status], "sample": b.metrics.get("sample")}
            if full and est:
                row["error"] = (est - full) / full
            print(f"{label:<36} whole {row['whole']} sampled {row['sampled']} "
                  f"error {row.get('error', float('nan')):+.2%}", flush=True)
            rows.append(row)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"size": args.size, "sms": args.sms or None, "knobs": args.knobs, "rows": rows},
                                   indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
