"""@manifest
launches:
  - kernel: rmsnorm_cols
    grid: ["cdiv(dim1 * dim2, 64)", batch_size, 1]
    args: [x, out, features, "dim1 * dim2", {f32: 1.0e-5}]
    constexprs: {BLOCK: 64, FTILE: 64}
    num_warps: 4
    num_stages: 1
outputs: {out: {shape: [batch_size, features, dim1, dim2], dtype: float32}}
requires: ["features <= 64"]
"""
# Triton: one pass over memory. Each program takes BLOCK neighbouring spatial positions of one batch
# (coalesced: a feature's positions are contiguous) and all of their features at once, an FTILE x BLOCK tile
# held in registers (FTILE the features rounded up to a power of 2, the rows past them masked off): the
# squares summed over the features in fp32, then every feature's x / sqrt(mean + eps) (IEEE square root and
# division, as PyTorch's) stored from the registers. WARPS warps a program; STAGES is Triton's pipeline depth.
import triton
import triton.language as tl


@triton.jit
def rmsnorm_cols(x, out, features, positions, eps, BLOCK: tl.constexpr, FTILE: tl.constexpr):
    b = tl.program_id(1)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    f = tl.arange(0, FTILE)
    mask = (f < features)[:, None] & (offs < positions)[None, :]
    at = b.to(tl.int64) * features * positions + f[:, None] * positions + offs[None, :]
    v = tl.load(x + at, mask=mask, other=0.0)
    rms = tl.sqrt_rn(tl.sum(v * v, axis=0) / features + eps)
    tl.store(out + at, tl.div_rn(v, rms[None, :]), mask=mask)
