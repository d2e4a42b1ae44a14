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
# The row sum in Triton, honest: a program a row, BLOCK columns at a time, summed in float32.
import triton
import triton.language as tl


@triton.jit
def rowsum(x, out, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, cols, BLOCK):
        acc += tl.load(x + row * cols + start + tl.arange(0, BLOCK))
    tl.store(out + row, tl.sum(acc, axis=0))
