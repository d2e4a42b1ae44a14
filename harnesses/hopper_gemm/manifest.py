"""The launch manifest a candidate declares in a leading `/* @manifest ... */` YAML comment.

A candidate is device code only: how it is launched (grid, block, cluster, dynamic shared memory,
argument order, TMA tensor maps) is data that the harness validates here and then builds itself.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from autodiscovery import AutoDiscoveryError
from autodiscovery.toolkit.expr import ExprError, evaluate
from autodiscovery.toolkit.manifest import read

MAX_DYNAMIC_SMEM = 232448  # 227 KiB: the most a Hopper block may opt into
MAX_WORKSPACE = 256 << 20  # a kernel's scratch memory (argument W)
OPERANDS = ("A", "B", "C")
SCALARS = ("M", "N", "K")

Expr = int | str


class ManifestError(AutoDiscoveryError):
    pass


class TensorMap(BaseModel):
    """A 2-D TMA descriptor over one operand, built by the harness and passed by value."""

    model_config = ConfigDict(extra="forbid")
    tensor: Literal["A", "B", "C"]
    box: tuple[Expr, Expr]
    """Box rows × columns, in elements (columns run along the contiguous dimension)."""
    swizzle: Literal[0, 32, 64, 128] = 128
    """Shared-memory swizzle in bytes."""
    l2_promotion: Literal[0, 64, 128, 256] = 0
    """L2 promotion in bytes (0: none)."""


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kernel: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    """Name of the extern "C" __global__ entry."""
    grid: tuple[Expr, Expr, Expr]
    block: tuple[int, int, int]
    cluster: tuple[int, int, int] = (1, 1, 1)
    smem: Expr = 0
    """Dynamic shared memory in bytes."""
    args: list[str]
    """Kernel arguments in order: A, B, C (device pointers), M, N, K (int32), W (the workspace), or a tensor
    map's name."""
    tensor_maps: dict[str, TensorMap] = {}
    requires: list[str] = []
    """Conditions on M, N, K that the kernel needs; a shape that fails one is refused."""
    tile: tuple[int, int] | None = None
    """The output tile a block computes at a time, rows × columns (BM × BN): what the harness counts tiles
    and waves by (none: not stated)."""
    split_k: int = Field(1, ge=1)
    """Slices the K reduction of each tile is cut into (partials added up by the kernel itself)."""
    workspace: Expr = 0
    """Bytes of global scratch memory the kernel gets as argument W, zero before its first launch; the
    kernel must leave zero what it needs zero (its flags) for the next one."""
    stream_k: bool = False
    """The last waves' k-iterations are split evenly over the CTAs (for the fit of the shape)."""
    ring_k: int | None = Field(None, ge=1)
    """Columns of K whose operand tiles a block's load ring holds in flight (stages × the K of a stage):
    with one tile an SM, what a block loads per L2 round trip (for the fit of the shape; none: not stated)."""
    multicast: Literal["A", "B"] | None = None
    """The operand the blocks of a cluster load once and share (TMA multicast), so L2 serves it once per
    cluster (for the fit of the shape: the operand bytes its tiles read from L2; none: each block loads its
    own)."""
    pdl: bool = False
    """Launched as a programmatic dependent launch: the kernel's blocks may start while the kernel before
    it in the stream is still running, and each must execute `griddepcontrol.wait` before it reads or
    writes global memory (the gate launches it behind a kernel that writes its inputs late)."""


class Launch(BaseModel):
    """A manifest resolved for one problem shape: every number final."""

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    cluster: tuple[int, int, int]
    smem: int
    args: list[str]
    tensor_maps: dict[str, dict]
    tile: tuple[int, int] | None = None
    split_k: int = 1
    workspace: int = 0
    stream_k: bool = False
    ring_k: int | None = None
    multicast: Literal["A", "B"] | None = None
    pdl: bool = False


def parse(source: str) -> Manifest:
    return read(source, Manifest, ManifestError)


def resolve(manifest: Manifest, M: int, N: int, K: int, sms: int = 132) -> Launch:
    """Check the manifest against the shape and the hardware limits; raise ManifestError with why."""
    names = {"M": M, "N": N, "K": K, "SMS": sms}
    try:
        for cond in manifest.requires:
            if not evaluate(cond, names):
                raise ManifestError(f"shape {M}x{N}x{K} not supported: requires {cond}")
        grid = tuple(int(evaluate(g, names)) for g in manifest.grid)
        smem = int(evaluate(manifest.smem, names))
        workspace = int(evaluate(manifest.workspace, names))
        maps = {
            name: {**tm.model_dump(), "box": [int(evaluate(b, names)) for b in tm.box]}
            for name, tm in manifest.tensor_maps.items()
        }
    except ExprError as exc:
        raise ManifestError(f"manifest: {exc}") from None
    threads = manifest.block[0] * manifest.block[1] * manifest.block[2]
    if min(manifest.block) < 1 or threads > 1024:
        raise ManifestError(f"manifest: block {manifest.block} must have 1 to 1024 threads")
    if min(grid) < 1 or grid[1] > 65535 or grid[2] > 65535 or grid[0] > 2**31 - 1:
        raise ManifestError(f"manifest: grid {grid} is out of range")
    if not 0 <= smem <= MAX_DYNAMIC_SMEM:
        raise ManifestError(f"manifest: smem {smem} bytes exceeds the {MAX_DYNAMIC_SMEM}-byte limit")
    size = manifest.cluster[0] * manifest.cluster[1] * manifest.cluster[2]
    if min(manifest.cluster) < 1 or size > 16:
        raise ManifestError(f"manifest: cluster {manifest.cluster} must hold 1 to 16 blocks")
    if any(g % c for g, c in zip(grid, manifest.cluster)):
        raise ManifestError(f"manifest: grid {grid} is not a multiple of cluster {manifest.cluster}")
    if not 0 <= workspace <= MAX_WORKSPACE:
        raise ManifestError(f"manifest: workspace {workspace} bytes is outside 0 to {MAX_WORKSPACE} bytes")
    if ("W" in manifest.args) != (workspace > 0):
        raise ManifestError("manifest: a workspace is passed as argument W, and W needs a workspace of some bytes")
    for arg in manifest.args:
        if arg not in OPERANDS + SCALARS + ("W",) and arg not in manifest.tensor_maps:
            raise ManifestError(f"manifest: unknown argument '{arg}' (A, B, C, M, N, K, W or a tensor map)")
    if manifest.multicast is not None and size < 2:
        raise ManifestError(f"manifest: multicast {manifest.multicast} needs a cluster of more than one block")
    if manifest.tile is not None and min(manifest.tile) < 1:
        raise ManifestError(f"manifest: tile {list(manifest.tile)} must be at least 1x1")
    for name, tm in maps.items():
        rows, cols = tm["box"]
        if not (1 <= rows <= 256 and 1 <= cols <= 256):
            raise ManifestError(f"manifest: tensor map {name}: box {rows}x{cols} must be 1..256 each way")
        if tm["swizzle"] and cols * 2 > tm["swizzle"]:
            raise ManifestError(
                f"manifest: tensor map {name}: a box row of {cols * 2} bytes exceeds the {tm['swizzle']}-byte swizzle"
            )
    return Launch(
        kernel=manifest.kernel, grid=(grid[0], grid[1], grid[2]), block=manifest.block, cluster=manifest.cluster,
        smem=smem, args=list(manifest.args), tensor_maps=maps, tile=manifest.tile, split_k=manifest.split_k,
        workspace=workspace, stream_k=manifest.stream_k, ring_k=manifest.ring_k, multicast=manifest.multicast,
        pdl=manifest.pdl,
    )
