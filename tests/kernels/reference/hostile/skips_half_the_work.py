# expect: incorrect: relative error .* over the tolerance
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
# Cheat, in Triton: each row's sum from its first half, doubled. On the normal distribution's mean of
# zero the sums look plausible; on every draw they are wrong.
import triton
import triton.language as tl


@triton.jit
def rowsum(x, out, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, cols // 2, BLOCK):
        acc += tl.load(x + row * cols + start + tl.arange(0, BLOCK))
    tl.store(out + row, 2.0 * tl.sum(acc, axis=0))
