"""@manifest
launches:
  - kernel: matmul_tiles
    grid: ["cdiv(M, 128) * cdiv(N, 256)", 1, 1]
    args: [A, B, out, M, N, K]
    constexprs: {BM: 128, BN: 256, BK: 64, GROUP: 8}
    num_warps: 8
    num_stages: 3
outputs: {out: {shape: [M, N], dtype: float16}}
"""
# Triton: a program a BM×BN tile of C, programs numbered in groups of GROUP tile rows so that those
# running together share their tiles of B in L2; the K loop loads BK-wide tiles of A and B (masked at the
# edges) and accumulates tl.dot in fp32 (Triton picks the tensor-core instructions: wgmma on sm_90),
# pipelined STAGES deep; the tile rounded to half once.
import triton
import triton.language as tl


@triton.jit
def matmul_tiles(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BM)
    tiles_n = tl.cdiv(N, BN)
    in_group = GROUP * tiles_n
    first_m = (pid // in_group) * GROUP
    rows = tl.minimum(tiles_m - first_m, GROUP)
    pm = first_m + (pid % in_group) % rows
    pn = (pid % in_group) // rows
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    pa = a + rm[:, None].to(tl.int64) * K + rk[None, :]
    pb = b + rk[:, None].to(tl.int64) * N + rn[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        left = K - k * BK
        x = tl.load(pa, mask=(rm[:, None] < M) & (rk[None, :] < left), other=0.0)
        y = tl.load(pb, mask=(rk[:, None] < left) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(x, y, acc)
        pa += BK
        pb += BK * N
    tl.store(c + rm[:, None].to(tl.int64) * N + rn[None, :], acc.to(tl.float16),
             mask=(rm[:, None] < M) & (rn[None, :] < N))
