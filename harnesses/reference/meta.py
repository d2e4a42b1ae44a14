"""What a problem's module returns, known without a GPU: its inputs, parameters and outputs (names,
shapes, dtypes) from one forward on PyTorch's meta device, where tensors have a shape and a dtype and no
data. `check` reads them so that a manifest whose outputs or argument names are wrong is refused before a
GPU is rented.

It runs in a child process (`python -m harnesses.reference.meta`), as the evaluation child runs the module
on the GPU: the parent process never imports PyTorch or the user's module. Where PyTorch is not installed,
or the module cannot run on the meta device (an operation without a meta kernel, a `.item()`), `facts`
says why in a line and the GPU's probe checks the outputs instead.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from typing import TYPE_CHECKING

from autodiscovery import ROOT

if TYPE_CHECKING:
    import torch

TIMEOUT_S = 120


def facts(path: str, sizes: dict[str, int], dtype: str | None) -> tuple[dict | None, str]:
    """({inputs, params, outputs}, '') from a forward on the meta device, or (None, why not)."""
    if importlib.util.find_spec("torch") is None:
        return None, ("PyTorch is not installed here (pip install torch): the outputs' shapes and dtypes and the "
                      "names of the module's parameters are checked on the GPU")
    job = json.dumps({"path": path, "sizes": sizes, "dtype": dtype})
    try:
        done = subprocess.run([sys.executable, "-m", "harnesses.reference.meta", job], cwd=ROOT,
                              capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None, f"the module took over {TIMEOUT_S} s on the meta device: its outputs are checked on the GPU"
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        err = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"the meta device could not run the module ({err[:200]}): its outputs are checked on the GPU"
    out = json.loads(lines[-1])
    if "error" in out:
        return None, f"the meta device could not run the module ({out['error'][:200]}): its outputs are checked on the GPU"
    return out, ""


def _describe(t: torch.Tensor) -> dict:
    return {"shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch.")}


def _run(job: dict) -> dict:
    import torch

    from harnesses.reference.inputs import input_names

    spec = importlib.util.spec_from_file_location("autodiscovery_problem", job["path"])
    if spec is None or spec.loader is None:
        raise ImportError(f"{job['path']} cannot be imported as a module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for k, v in job["sizes"].items():
        setattr(module, k, v)
    dtype = getattr(torch, job["dtype"]) if job.get("dtype") else None
    with torch.device("meta"):
        model = module.Model(*list(module.get_init_inputs())).eval()
        if dtype is not None:
            model = model.to(dtype)
        sample = list(module.get_inputs())
        sample = [x.to("meta") if isinstance(x, torch.Tensor) else x for x in sample]
        if dtype is not None:
            sample = [x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in sample]
        with torch.no_grad():
            out = model(*sample)
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    names = input_names(model.forward, len(sample))
    params = dict(model.named_parameters()) | dict(model.named_buffers())
    return {"inputs": [{"name": n, **_describe(x)} for n, x in zip(names, sample) if isinstance(x, torch.Tensor)],
            "params": [{"name": k, **_describe(v)} for k, v in params.items()],
            "outputs": [_describe(o) for o in outs if isinstance(o, torch.Tensor)]}


if __name__ == "__main__":
    try:
        result = _run(json.loads(sys.argv[1]))
    except Exception as exc:  # the user's module failed on the meta device: said in one line, as the GPU's probe does
        result = {"error": f"{type(exc).__name__}: {' '.join(str(exc).split())}"}
    print(json.dumps(result))
