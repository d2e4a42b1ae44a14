"""A tuned GEMM as a library: the dispatch table of one run or a suite's runs (shape -> the best kernel's
cubin and launch), written beside `tuned_gemm.py`, a module with no dependency on AutoDiscovery."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

MODULES = [Path(__file__).with_name(n) for n in ("tuned_gemm.py", "tuned_gemm_driver.py")]


def write(folder: Path, entries: list[dict], device: str | None, arch: str, sms: int | None = None) -> dict:
    """`entries`: one per tuned shape, each with `shape`, `cubin` (a built artifact's path), `launch` (the
    manifest resolved at that shape) and what the run measured; `device` and `sms`: the GPU they were
    tuned on, the only one the module launches them on unless told otherwise. Writes folder/dispatch.json,
    folder/kernels/*.cubin and folder/tuned_gemm.py (with tuned_gemm_driver.py); returns the table, with a `summary` for the command."""
    kernels = folder / "kernels"
    kernels.mkdir(parents=True, exist_ok=True)
    table = {"device": device, "sms": sms, "arch": arch, "kernels": []}
    for e in entries:
        M, N, K = e["shape"]
        name = f"kernels/gemm_{M}x{N}x{K}.cubin"
        shutil.copyfile(e["cubin"], folder / name)
        table["kernels"].append({k: v for k, v in e.items() if k != "cubin"} | {"cubin": name})
    (folder / "dispatch.json").write_text(json.dumps(table, indent=1) + "\n")
    for module in MODULES:
        shutil.copyfile(module, folder / module.name)
    shapes = ", ".join("×".join(map(str, k["shape"])) for k in table["kernels"])
    return table | {"summary": f"{len(table['kernels'])} tuned shapes ({shapes}), their cubins and tuned_gemm.py; "
                               f"use it with `sys.path.insert(0, '{folder}'); from tuned_gemm import gemm`"}
