"""Calibrate the gate: errors of honest fp32-accumulating kernels and of low-precision ones, by shape.

    python tests/calibrate_gate.py [--shape 2048 --shape 1000x778x520 ...] [--per-dist 3] [--json out.json]

Honest: every shipped family's default configuration, plus tests/kernels/honest/ (other summation
orders, split-K). Low precision: fp16 and bf16 accumulation from tests/kernels/hostile/. For each
shape and input distribution the table gives the worst honest relative error and the best
low-precision one; the tolerance must lie between them at every shape.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent))

from autodiscovery import campaign as campaigns  # noqa: E402
from autodiscovery.agents.space import Space  # noqa: E402
from autodiscovery.running.runner import parse_shape  # noqa: E402
from harnesses.hopper_gemm import HopperGemmHarness  # noqa: E402
from harnesses.hopper_gemm.measure import DISTRIBUTIONS  # noqa: E402

LOW_PRECISION = ["fp16_accumulate.cu", "fp16_chunk_accumulate.cu", "low_precision.cu"]
SUITE = ["2048", "4096", "1000x778x520", "2048x2048x16384", "8192x8192x1024"]


def kernels() -> tuple[dict[str, str], dict[str, str]]:
    space = Space("hopper_gemm")
    honest = {f.name: space.render(f.name, f.default) for f in space.ladder()}
    honest |= {p.stem: p.read_text() for p in sorted((HERE / "kernels" / "honest").glob("*.cu"))}
    low = {Path(n).stem: (HERE / "kernels" / "hostile" / n).read_text() for n in LOW_PRECISION}
    return honest, low


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", action="append", help="N or MxNxK (repeatable); default: the suite")
    ap.add_argument("--per-dist", type=int, default=3, help="draws per distribution and kernel")
    ap.add_argument("--json", help="write every error here")
    args = ap.parse_args()
    honest, low = kernels()
    everything = {"shapes": {}}
    rows = []
    for text in args.shape or SUITE:
        M, N, K = parse_shape(text)
        c = campaigns.load("hopper-gemm", [f"problem.M={M}", f"problem.N={N}", f"problem.K={K}", "harness.timeout_s=600"])
        h = HopperGemmHarness(c)
        h.preflight()
        errors: dict[str, dict] = {}
        for group in (honest, low):
            specs = {}
            for name, src in group.items():
                try:
                    h.check(src)
                except Exception as exc:  # a family that does not take this shape
                    errors[name] = {"skipped": str(exc)}
                    continue
                build = h.build(src)
                if not build.ok:
                    errors[name] = {"skipped": "does not build"}
                    continue
                specs[name] = (src, build)
            out = h.calibrate(specs, args.per_dist)
            if out.status != "ok":
                print(f"{M}x{N}x{K}: calibration failed: {out.status}: {out.log[:500]}", file=sys.stderr)
                return 1
            errors |= out.metrics["errors"]
            tol = out.metrics["tolerance"]
        everything["shapes"][f"{M}x{N}x{K}"] = errors | {"tolerance": tol}

        def worst(names, dist, pick, errors=errors):
            vals = [r["rel_err"] if not r["nonfinite"] else float("inf")
                    for n in names if "skipped" not in errors[n] for r in errors[n][dist]]
            return pick(vals) if vals else None

        for dist in DISTRIBUTIONS:
            hw = worst(honest, dist, max)
            hn = max((n for n in honest if "skipped" not in errors[n]),
                     key=lambda n: max(r["rel_err"] for r in errors[n][dist]))
            lb = worst(low, dist, min)
            rows.append((f"{M}x{N}x{K}", dist, hw, hn, tol, lb))
    print(f"{'shape':<16} {'inputs':<8} {'worst honest':>13} {'(kernel)':<12} {'tolerance':>10} {'best low-precision':>19}")
    for shape, dist, hw, hn, tol, lb in rows:
        print(f"{shape:<16} {dist:<8} {hw:>13.3g} {hn:<12} {tol:>10.3g} {lb:>19.3g}")
    if args.json:
        Path(args.json).write_text(json.dumps(everything, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
