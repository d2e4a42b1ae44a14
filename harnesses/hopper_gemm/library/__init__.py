"""A tuned GEMM as a library: the dispatch table of one run or a suite's runs (shape -> the best kernel's
cubin and launch), written beside `tuned_gemm.py`, a module with no dependency on AutoDiscovery."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from autodiscovery.toolkit.text import plural

if TYPE_CHECKING:
    from harnesses.hopper_gemm import HopperGemmHarness

MODULES = [Path(__file__).with_name(n) for n in ("tuned_gemm.py", "tuned_gemm_driver.py")]


def export(harness: type[HopperGemmHarness], items: list[dict], folder: Path) -> dict:
    """The best kernels of recorded runs (`items`, as `export --library` gathers them) as a library: each
    built for its shape by `harness` (the hopper_gemm harness class) and resolved at it, with what its run
    measured; for a shape tuned twice, the better one. Runs measured on different GPUs are refused."""
    from autodiscovery.toolkit import sandbox
    from autodiscovery.toolkit.text import first_line
    from harnesses.hopper_gemm import HarnessError
    from harnesses.hopper_gemm.manifest import ManifestError

    gpus = {(it["fingerprint"].get("gpu"), it["fingerprint"].get("sms")) for it in items}
    if len(gpus) > 1:
        raise HarnessError("the runs were measured on different GPUs (" + ", ".join(
            f"{g} with {n} SMs" for g, n in sorted(gpus, key=str)) + "): export each GPU's runs on their own")
    best: dict[tuple, dict] = {}
    device = arch = sms = None
    for it in items:
        h = harness(it["campaign"])
        h.adopt(it["fingerprint"])
        where = f"run {it['run']} #{it['seq']}"
        try:
            launch = h.check(it["source"])
        except (ManifestError, sandbox.RefusedSource) as exc:
            raise HarnessError(f"{where}: {exc}") from None
        build = h.build(it["source"])
        if not build.ok or not build.artifact:
            raise HarnessError(f"{where} does not build here: {first_line(build.log) or 'unknown error'}")
        device, sms, arch = it["fingerprint"].get("gpu"), it["fingerprint"].get("sms"), h.settings.arch
        # the score is × the run's baseline; the other cuBLAS, where timed beside it, is in the figures
        versus = ({"x_cublas": it["figures"].get("x_gemmex"), "x_best_lt": it["score"]}
                  if h.settings.baseline == "best_lt" else
                  {"x_cublas": it["score"], "x_best_lt": it["figures"].get("x_best_lt")})
        entry = {"shape": list(h.shape), "label": it["label"], "run": it["run"], "seq": it["seq"],
                 "family": it["family"], "knobs": it["knobs"], **versus, "tflops": it["figures"].get("tflops"),
                 "launch": launch.model_dump(mode="json"), "cubin": build.artifact}
        if h.shape not in best or (entry["x_cublas"] or 0) > (best[h.shape]["x_cublas"] or 0):
            best[h.shape] = entry
    return write(folder, list(best.values()), device, arch or "sm_90a", sms)


def write(folder: Path, entries: list[dict], device: str | None, arch: str, sms: int | None = None) -> dict:
    """`entries`: one per tuned shape, each with `shape`, `cubin` (a built artifact's path), `launch` (the
    manifest resolved at that shape) and what the run measured; `device` and `sms`: the GPU they were
    tuned on, the only one the module launches them on unless told otherwise. Writes folder/dispatch.json,
    folder/kernels/*.cubin and folder/tuned_gemm.py (with tuned_gemm_driver.py); returns the table, with
    a `summary` for the command."""
    kernels = folder / "kernels"
    kernels.mkdir(parents=True, exist_ok=True)
    tuned: list[dict] = []
    for e in entries:
        M, N, K = e["shape"]
        name = f"kernels/gemm_{M}x{N}x{K}.cubin"
        shutil.copyfile(e["cubin"], folder / name)
        tuned.append({k: v for k, v in e.items() if k != "cubin"} | {"cubin": name})
    table = {"device": device, "sms": sms, "arch": arch, "kernels": tuned}
    (folder / "dispatch.json").write_text(json.dumps(table, indent=1) + "\n")
    for module in MODULES:
        shutil.copyfile(module, folder / module.name)
    shapes = ", ".join("×".join(map(str, k["shape"])) for k in tuned)
    slower = [k for k in tuned if k.get("x_cublas") is not None and k["x_cublas"] < 1]
    left = (f"; {len(slower)} measured slower than cuBLAS in their runs ("
            + ", ".join(f"{'×'.join(map(str, k['shape']))} {k['x_cublas']:.3f}×" for k in slower)
            + "), which gemm leaves to cuBLAS unless use_slower_kernels()") if slower else ""
    return table | {"summary": f"{plural(len(tuned), 'tuned shape')} ({shapes}), their cubins and tuned_gemm.py"
                               f"{left}; use it with `sys.path.insert(0, '{folder}'); from tuned_gemm import gemm`"}
