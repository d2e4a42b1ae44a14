# expect: incorrect: past the end of out|elements unwritten
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
# Cheat, in Triton: honest for ten launches, then idle. A Triton kernel has no memory of its own that
# lasts from one launch to the next, so it keeps a launch count where it should write nothing: a word
# 4 KiB past the end of its output, advanced by one program a launch. From the eleventh launch on it
# returns at once, leaving the output as it finds it. The harness checks every launch and every guard
# zone: the count is a write past the output from the first launch.
import triton
import triton.language as tl


@triton.jit
def rowsum(x, out, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    rows = tl.num_programs(0)
    counter = (out + rows + 1024).to(tl.pointer_type(tl.int32))
    if tl.load(counter, volatile=True) > 10:
        return
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, cols, BLOCK):
        acc += tl.load(x + row * cols + start + tl.arange(0, BLOCK))
    tl.store(out + row, tl.sum(acc, axis=0))
    if row == 0:
        tl.atomic_add(counter, 1)
