"""A tuned GEMM as a library: the dispatch table of one run or a suite's runs (shape -> the best kernel's
cubin and launch), written beside `tuned_gemm.py`, a module with no dependency on AutoDiscovery."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

MODULE = Path(__file__).with_name("tuned_gemm.py")


def write(folder: Path, entries: list[dict], device: str | None, arch: str) -> dict:
    """`entries`: one per tuned shape, each with `shape`, `cubin` (a built artifact's path), `launch` (the
    manifest resolved at that shape) and what the run measured. Writes folder/dispatch.json,
    folder/kernels/*.cubin and folder/tuned_gemm.py; returns the table, with a `summary` for the command."""
    kernels = folder / "kernels"
    kernels.mkdir(parents=True, exist_ok=True)
    table = {"device": device, "arch": arch, "kernels": []}
    for e in entries:
        M, N, K = e["shape"]
        name = f"kernels/gemm_{M}x{N}x{K}.cubin"
        shutil.copyfile(e["cubin"], folder / name)
        table["kernels"].append({k: v for k, v in e.items() if k != "cubin"} | {"cubin": name})
    (folder / "dispatch.json").write_text(json.dumps(table, indent=1) + "\n")
    shutil.copyfile(MODULE, folder / "tuned_gemm.py")
    shapes = ", ".join("×".join(map(str, k["shape"])) for k in table["kernels"])
    return table | {"summary": f"{len(table['kernels'])} tuned shapes ({shapes}), their cubins and tuned_gemm.py; "
                               f"use it with `sys.path.insert(0, '{folder}'); from tuned_gemm import gemm`"}
