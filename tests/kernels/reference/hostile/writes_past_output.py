# expect: incorrect: wrote \d+ bytes past the end of out
"""@manifest
launches:
  - kernel: rowsum
    grid: [batch_size, 1, 1]
    args: [x, out, dim]
    constexprs: {BLOCK: 1024}
    num_warps: 4
outputs: {out: {shape: [batch_size], dtype: float32}}
requires: ["dim % 1024 == 0"]
"""
# Cheat, in Triton: the right sums, and the last program stores a block of zeros just past the end of
# the output with no mask, as a kernel whose store's mask was left off does.
import triton
import triton.language as tl


@triton.jit
def rowsum(x, out, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, cols, BLOCK):
        acc += tl.load(x + row * cols + start + tl.arange(0, BLOCK))
    tl.store(out + row, tl.sum(acc, axis=0))
    if row == tl.num_programs(0) - 1:
        tl.store(out + row + 1 + tl.arange(0, BLOCK), tl.zeros([BLOCK], dtype=tl.float32))
