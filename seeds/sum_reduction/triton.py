"""@manifest
launches:
  - kernel: sum_cols
    grid: ["cdiv(dim2, 128)", batch_size, 1]
    args: [x, out, dim1, dim2]
    constexprs: {BLOCK: 128}
    num_warps: 1
    num_stages: 3
outputs: {out: {shape: [batch_size, 1, dim2], dtype: float32}}
requires: ["reduce_dim == 1"]
"""
# Triton: each program takes BLOCK neighbouring columns of one batch (coalesced) and adds their dim1 rows in
# order, one fp32 accumulator a column, then writes the sums. WARPS warps a program; STAGES is the software
# pipeline's depth over the rows.
import triton
import triton.language as tl


@triton.jit
def sum_cols(x, out, rows, cols, BLOCK: tl.constexpr):
    b = tl.program_id(1)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < cols
    base = b.to(tl.int64) * rows * cols
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in tl.range(0, rows, num_stages=3):
        acc += tl.load(x + base + i * cols + offs, mask=mask, other=0.0)
    tl.store(out + b.to(tl.int64) * cols + offs, acc, mask=mask)
