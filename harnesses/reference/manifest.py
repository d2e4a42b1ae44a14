"""The launch manifest of a reference candidate, in a leading `/* @manifest ... */` YAML comment.

A candidate is device code only. Its manifest says which kernels run and in what order, each one's
grid, block and dynamic shared memory as expressions of the problem's sizes, its arguments, the
outputs it writes (the reference's, in the order `forward` returns them, each with its shape and
dtype) and any scratch buffers the harness should allocate for it:

    /* @manifest
    launches:
      - kernel: row_max                        # an extern "C" __global__ entry point
        grid: [batch_size, 1, 1]               # integers or expressions of the sizes (and SMS)
        block: [256, 1, 1]
        smem: 0                                # dynamic shared memory, bytes (an expression too)
        args: [x, partial, batch_size, dim]    # tensors by name; a size expression is an int32
      - kernel: normalize
        grid: ["cdiv(batch_size * dim, 256)", 1, 1]
        block: [256, 1, 1]
        args: [x, partial, out, {i64: "batch_size * dim"}, {f32: 1.0e-5}]
    outputs: {out: {shape: [batch_size, dim], dtype: float32}}
    scratch: {partial: {shape: [batch_size], dtype: float32}}
    requires: ["dim % 4 == 0"]
    */

Tensor names: the reference's inputs (by `forward`'s parameter names, else input0, input1, ...), its
parameters and buffers by `state_dict` name, the outputs and scratch buffers the manifest declares.
A scalar argument is an integer expression (int32), or `{i32|i64: expression}`, `{f32|f64: number}`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from autodiscovery import AutoDiscoveryError
from autodiscovery.toolkit.expr import ExprError, evaluate
from autodiscovery.toolkit.manifest import is_triton, read

MAX_DYNAMIC_SMEM = 232448  # 227 KiB: the most a Hopper block may opt into
DTYPE_BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2,
               "int8": 1, "uint8": 1, "bool": 1}
SCALARS = ("i32", "i64", "f32", "f64")

Expr = int | str


class ManifestError(AutoDiscoveryError):
    pass


class Launch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kernel: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    """Name of the extern "C" __global__ entry point."""
    grid: tuple[Expr, Expr, Expr]
    block: tuple[Expr, Expr, Expr]
    smem: Expr = 0
    args: list[str | int | dict[Literal["i32", "i64", "f32", "f64"], Expr | float]]


class Tensor(BaseModel):
    model_config = ConfigDict(extra="forbid")
    shape: list[Expr]
    dtype: Literal["float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool"]


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    launches: list[Launch] = Field(min_length=1)
    outputs: dict[str, Tensor] = Field(min_length=1)
    """The reference's outputs, in the order `forward` returns them."""
    scratch: dict[str, Tensor] = {}
    requires: list[str] = []
    """Conditions on the sizes that the kernels need; a problem that fails one is refused."""


class TritonLaunch(BaseModel):
    """A launch of a Triton candidate's @triton.jit function: no block (Triton sizes it from `num_warps`), its
    `tl.constexpr` parameters by name, and Triton's two launch options, as a search space's knobs set them."""

    model_config = ConfigDict(extra="forbid")
    kernel: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    """Name of the @triton.jit function."""
    grid: tuple[Expr, Expr, Expr]
    args: list[str | int | dict[Literal["i32", "i64", "f32", "f64"], Expr | float]]
    """The function's arguments before its constexprs, in order: tensors by name, sizes as expressions."""
    constexprs: dict[str, Expr | float | bool] = {}
    """Its `tl.constexpr` parameters: integers as expressions of the sizes, or literal floats and bools."""
    num_warps: int = Field(4, ge=1, le=32)
    num_stages: int = Field(3, ge=1, le=8)


class TritonManifest(BaseModel):
    """A Triton candidate's manifest, in its file's docstring: its @triton.jit functions' launches, and the
    outputs and scratch buffers as a CUDA candidate's manifest declares them."""

    model_config = ConfigDict(extra="forbid")
    launches: list[TritonLaunch] = Field(min_length=1)
    outputs: dict[str, Tensor] = Field(min_length=1)
    scratch: dict[str, Tensor] = {}
    requires: list[str] = []


def parse(source: str) -> Manifest | TritonManifest:
    """The manifest of a CUDA candidate, or of a Triton one (a Python file with @triton.jit functions)."""
    if is_triton(source):
        return read(source, TritonManifest, ManifestError)
    return read(source, Manifest, ManifestError)


def _value(expr: Expr, names: dict[str, int], what: str) -> int:
    try:
        v = evaluate(expr, names)
    except ExprError as exc:
        raise ManifestError(f"{what}: {exc}") from None
    if isinstance(v, bool) or not isinstance(v, int):
        raise ManifestError(f"{what}: '{expr}' is not an integer")
    return v


def resolve(manifest: Manifest | TritonManifest, facts: dict, sms: int = 132) -> dict:
    """The manifest made final for one problem: every number evaluated, every name found among the
    reference's tensors (`facts`: sizes, inputs, params, outputs as the probe found them; before a
    probe, the sizes and input names alone, and names it cannot know are taken on trust)."""
    sizes = dict(facts.get("sizes", {}))
    names = sizes | {"SMS": sms}
    for cond in manifest.requires:
        try:
            ok = evaluate(cond, names)
        except ExprError as exc:
            raise ManifestError(f"requires: {exc}") from None
        if not ok:
            shown = ", ".join(f"{k}={v}" for k, v in sizes.items())
            raise ManifestError(f"this problem ({shown}) does not satisfy the kernel's requires '{cond}'")
    inputs = [i["name"] for i in facts.get("inputs", [])] or list(facts.get("input_names", []))
    params = [p["name"] for p in facts.get("params", [])]
    probed = "outputs" in facts
    tensors: dict[str, dict] = {}
    for kind, declared in (("output", manifest.outputs), ("scratch", manifest.scratch)):
        for name, t in declared.items():
            if name in inputs or name in params or name in names or name in tensors:
                raise ManifestError(f"{kind} '{name}' takes a name already in use (an input, a parameter, a size)")
            shape = [_value(d, names, f"{kind} {name} shape") for d in t.shape]
            if any(d < 0 for d in shape):
                raise ManifestError(f"{kind} {name}: negative size in {shape}")
            tensors[name] = {"name": name, "kind": kind, "shape": shape, "dtype": t.dtype}
    outputs = [t for t in tensors.values() if t["kind"] == "output"]
    if probed:
        ref = facts["outputs"]
        if len(ref) != len(outputs):
            raise ManifestError(f"the manifest declares {len(outputs)} output(s), the reference returns {len(ref)}")
        for mine, theirs in zip(outputs, ref):
            if (mine["shape"], mine["dtype"]) != (list(theirs["shape"]), theirs["dtype"]):
                raise ManifestError(f"output '{mine['name']}': the manifest declares {mine['dtype']} {mine['shape']}, "
                                    f"the reference returns {theirs['dtype']} {list(theirs['shape'])}")
    known = set(inputs) | set(params) | set(tensors)
    launches = []
    steps: list[Launch | TritonLaunch] = [*manifest.launches]
    for i, launch in enumerate(steps):
        where = f"launches[{i}] ({launch.kernel})"
        grid = [_value(g, names, f"{where} grid") for g in launch.grid]
        triton: dict = {}
        if isinstance(launch, TritonLaunch):
            block, smem = [32 * launch.num_warps, 1, 1], 0
            triton = {"num_warps": launch.num_warps, "num_stages": launch.num_stages,
                      "constexprs": {k: v if isinstance(v, (bool, float)) else _value(v, names, f"{where} constexprs {k}")
                                     for k, v in launch.constexprs.items()}}
        else:
            block = [_value(b, names, f"{where} block") for b in launch.block]
            smem = _value(launch.smem, names, f"{where} smem")
        if min(grid) < 1 or min(block) < 1:
            raise ManifestError(f"{where}: grid {grid} and block {block} must be positive")
        if block[0] * block[1] * block[2] > 1024:
            raise ManifestError(f"{where}: a block of {block[0] * block[1] * block[2]} threads (at most 1024)")
        if not 0 <= smem <= MAX_DYNAMIC_SMEM:
            raise ManifestError(f"{where}: dynamic shared memory {smem} bytes (at most {MAX_DYNAMIC_SMEM})")
        args: list[list[Any]] = []  # [kind, value]: a tensor's name, or a scalar's value
        for arg in launch.args:
            if isinstance(arg, dict):
                ((kind, value),) = arg.items()
                if kind in ("f32", "f64"):
                    if isinstance(value, bool) or not isinstance(value, (int, float)):
                        raise ManifestError(f"{where} args: {kind} takes a number, not '{value}'")
                    args.append([kind, float(value)])
                else:
                    args.append([kind, _value(value if isinstance(value, (int, str)) else str(value), names,
                                              f"{where} args")])
            elif isinstance(arg, str) and (arg in known or (not probed and arg not in names and _tensor_name(arg)
                                                           and not _is_expression(arg, names))):
                args.append(["tensor", arg])
            elif isinstance(arg, str) and probed and _tensor_name(arg) and arg not in names:
                raise ManifestError(f"{where} args: '{arg}' names nothing this problem has (inputs: "
                                    f"{', '.join(inputs) or 'none'}; parameters: {', '.join(params) or 'none'}; "
                                    f"outputs and scratch: {', '.join(tensors) or 'none'}; sizes: "
                                    f"{', '.join(sizes) or 'none'})")
            else:
                args.append(["i32", _value(arg, names, f"{where} args")])
        for kind, v in args:
            if kind == "i32" and not -2**31 <= v < 2**31:
                raise ManifestError(f"{where} args: {v} does not fit an int32 (use {{i64: ...}})")
        launches.append({"kernel": launch.kernel, "grid": grid, "block": block, "smem": smem, "args": args, **triton})
    used = {name for launch in launches for kind, name in launch["args"] if kind == "tensor"}
    unwritten = [o["name"] for o in outputs if o["name"] not in used]
    if unwritten:
        raise ManifestError(f"output(s) {', '.join(unwritten)} are passed to no kernel")
    return {"launches": launches, "outputs": outputs, "scratch": [t for t in tensors.values() if t["kind"] == "scratch"],
            "language": "triton" if isinstance(manifest, TritonManifest) else "cuda"}


def _tensor_name(text: str) -> bool:
    """A name a tensor may have: an input's, or a parameter's by `state_dict` name (`ln.weight`)."""
    return all(part.isidentifier() for part in text.split("."))


def _is_expression(text: str, names: dict[str, int]) -> bool:
    try:
        evaluate(text, names)
        return True
    except ExprError:
        return False


def nbytes(t: dict) -> int:
    n = 1
    for d in t["shape"]:
        n *= d
    return n * DTYPE_BYTES[t["dtype"]]
