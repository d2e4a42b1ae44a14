"""@manifest
launches:
  - kernel: sum_cols
    grid: ["cdiv(dim2, 128)", batch_size, 1]
    args: [x, out, dim1, dim2]
    constexprs: {BLOCK: 128, ROWS: 8}
    num_warps: 4
    num_stages: 3
outputs: {out: {shape: [batch_size, 1, dim2], dtype: float32}}
requires: ["reduce_dim == 1"]
"""
# Triton: each program takes BLOCK neighbouring columns of one batch (coalesced) and reads ROWS of their dim1
# rows a step (a ROWS x BLOCK tile: ROWS times the bytes in flight of one row a step), adding each tile
# into ROWS x BLOCK fp32 accumulators, row r of the tile into row r; the ROWS partial sums of a column are
# added at the end. WARPS warps a program; STAGES is the software pipeline's depth over the steps.
import triton
import triton.language as tl


@triton.jit
def sum_cols(x, out, rows, cols, BLOCK: tl.constexpr, ROWS: tl.constexpr):
    b = tl.program_id(1)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < cols
    r = tl.arange(0, ROWS)
    base = b.to(tl.int64) * rows * cols
    acc = tl.zeros([ROWS, BLOCK], dtype=tl.float32)
    for i in tl.range(0, rows, ROWS, num_stages=3):
        m = ((i + r) < rows)[:, None] & mask[None, :]
        acc += tl.load(x + base + (i + r)[:, None] * cols + offs[None, :], mask=m, other=0.0)
    tl.store(out + b.to(tl.int64) * cols + offs, tl.sum(acc, axis=0), mask=mask)
