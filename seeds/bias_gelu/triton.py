"""@manifest
launches:
  - kernel: bias_gelu_flat
    grid: ["cdiv(batch_size * features, 1024)", 1, 1]
    args: [x, bias, out, {i64: "batch_size * features"}, features]
    constexprs: {BLOCK: 1024}
    num_warps: 4
    num_stages: 1
outputs: {out: {shape: [batch_size, features], dtype: float32}}
"""
# Triton: each program takes BLOCK consecutive elements of the flattened matrix (coalesced, vectorized by
# Triton), adds the bias of each element's column, and writes the exact GELU v * 0.5 * (1 + erf(v / sqrt(2)))
# in fp32, as PyTorch computes it. WARPS warps a program.
import triton
import triton.language as tl


@triton.jit
def bias_gelu_flat(x, bias, out, n, features, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(x + offs, mask=mask, other=0.0) + tl.load(bias + offs % features, mask=mask, other=0.0)
    tl.store(out + offs, 0.5 * v * (1.0 + tl.math.erf(v * 0.7071067811865476)), mask=mask)
