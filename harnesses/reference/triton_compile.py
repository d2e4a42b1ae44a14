"""A Triton candidate compiled for the target without a GPU: each launch's @triton.jit function, with the
signature its plan gives (a tensor's pointer type from its dtype, a size an int32 or int64, a float an
fp32, the constexprs as the plan sets them) and its `num_warps` and `num_stages`, through Triton's compiler
for sm_XX. A kernel Triton cannot compile is known before a GPU is rented, as an nvcc error is.

It runs in a child process (`python -m harnesses.reference.triton_compile`), which imports the file only
after the static rule has read it again: the parent never imports Triton or the candidate.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

from autodiscovery import ROOT

TIMEOUT_S = 300
MEASURED = "3.6.0"
"""The Triton the project's Triton candidates were measured with (PyTorch 2.11's; the `triton` extra's pin)."""
POINTER = {"float32": "*fp32", "float16": "*fp16", "bfloat16": "*bf16", "float64": "*fp64", "int32": "*i32",
           "int64": "*i64", "int16": "*i16", "int8": "*i8", "uint8": "*u8", "bool": "*i1"}
SCALAR = {"i32": "i32", "i64": "i64", "f32": "fp32", "f64": "fp64"}


def available() -> bool:
    return importlib.util.find_spec("triton") is not None


def compile_file(path: str, plan: dict, dtypes: dict[str, str], arch: str) -> tuple[bool, str, dict]:
    """(compiled, what it says, facts): Triton's compile of every launch of the file at `path` for `arch`
    (sm_90a: cuda 90), each tensor argument typed by `dtypes` (name -> dtype)."""
    job = json.dumps({"path": path, "plan": plan, "dtypes": dtypes, "cc": int("".join(c for c in arch if c.isdigit()))})
    try:
        done = subprocess.run([sys.executable, "-m", "harnesses.reference.triton_compile", job], cwd=ROOT,
                              capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return False, f"Triton took over {TIMEOUT_S} s to compile it", {}
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        err = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return False, f"the Triton compile did not finish: {err[:300]}", {}
    out = json.loads(lines[-1])
    if "error" in out:
        return False, out["error"], {}
    return True, out["version"], out["kernels"]


def _compile(job: dict) -> dict:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from autodiscovery.toolkit import triton_rule

    module = triton_rule.load(job["path"])
    kernels = {}
    for launch in job["plan"]["launches"]:
        fn = getattr(module, launch["kernel"])
        names = list(fn.arg_names)
        takes = [n for n in names if n not in launch["constexprs"]]
        if len(takes) != len(launch["args"]):
            raise TypeError(f"{launch['kernel']} takes {len(takes)} arguments before its constexprs "
                            f"({', '.join(takes)}), the manifest passes {len(launch['args'])}")
        unknown = sorted(set(launch["constexprs"]) - set(names))
        if unknown:
            raise TypeError(f"{launch['kernel']} has no parameter {', '.join(unknown)} (the manifest's constexprs)")
        signature, i = {}, 0
        for name in names:
            if name in launch["constexprs"]:
                signature[name] = "constexpr"
                continue
            kind, value = launch["args"][i]
            i += 1
            signature[name] = POINTER.get(job["dtypes"].get(value, ""), "*fp32") if kind == "tensor" else SCALAR[kind]
        src = ASTSource(fn, signature=signature, constexprs=dict(launch["constexprs"]))
        k = triton.compile(src, target=GPUTarget("cuda", job["cc"], 32),
                           options={"num_warps": launch["num_warps"], "num_stages": launch["num_stages"]})
        kernels[launch["kernel"]] = {"shared": int(k.metadata.shared)}
    return {"version": f"Triton {triton.__version__}", "kernels": kernels}


if __name__ == "__main__":
    try:
        result = _compile(json.loads(sys.argv[1]))
    except Exception as exc:  # the candidate's code: what Triton said of it, in one line
        result = {"error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:600]}"}
    print(json.dumps(result))
