"""@manifest
launches:
  - kernel: softmax_rows
    grid: ["cdiv(batch_size, 1)", 1, 1]
    args: [x, out, batch_size, dim]
    constexprs: {BLOCK: 16384, ROWS: 1}
    num_warps: 16
    num_stages: 2
outputs: {out: {shape: [batch_size, dim], dtype: float32}}
requires: ["dim <= 16384"]
"""
# Triton: each program takes ROWS rows in turn, a whole row of BLOCK (a power of two >= dim) columns in
# registers at a time: one read of the row (masked past dim), its maximum, exp2 of the scaled difference,
# the sum, one write. WARPS warps share a row; STAGES is the software pipeline's depth over the rows.
import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def softmax_rows(x, out, rows, cols, BLOCK: tl.constexpr, ROWS: tl.constexpr):
    first = tl.program_id(0) * ROWS
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    for r in tl.range(0, ROWS, num_stages=2):
        row = first + r
        if row < rows:
            base = row.to(tl.int64) * cols
            v = tl.load(x + base + offs, mask=mask, other=-float("inf"))
            v = v - tl.max(v, axis=0)
            e = tl.math.exp2(v * LOG2E)
            tl.store(out + base + offs, e / tl.sum(e, axis=0), mask=mask)
