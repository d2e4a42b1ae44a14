"""@manifest
launches:
  - kernel: rmsnorm_cols
    grid: ["cdiv(dim1 * dim2, 256)", batch_size, 1]
    args: [x, out, features, "dim1 * dim2", {f32: 1.0e-5}]
    constexprs: {BLOCK: 256}
    num_warps: 2
    num_stages: 2
outputs: {out: {shape: [batch_size, features, dim1, dim2], dtype: float32}}
"""
# Triton: each program takes BLOCK neighbouring spatial positions of one batch (coalesced: a feature's
# positions are contiguous), sums x^2 over the features in fp32 in registers, then writes every feature's
# x / sqrt(mean + eps) (IEEE square root and division, as PyTorch's). WARPS warps a program; STAGES is the
# software pipeline's depth over the features.
import triton
import triton.language as tl


@triton.jit
def rmsnorm_cols(x, out, features, positions, eps, BLOCK: tl.constexpr):
    b = tl.program_id(1)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < positions
    base = b.to(tl.int64) * features * positions
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for f in tl.range(0, features, num_stages=2):
        v = tl.load(x + base + f * positions + offs, mask=mask, other=0.0)
        acc += v * v
    rms = tl.sqrt_rn(acc / features + eps)
    for f in tl.range(0, features, num_stages=2):
        v = tl.load(x + base + f * positions + offs, mask=mask, other=0.0)
        tl.store(out + base + f * positions + offs, tl.div_rn(v, rms), mask=mask)
