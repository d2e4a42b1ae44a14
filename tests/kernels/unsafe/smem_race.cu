// expect-sanitize: racecheck: (hazard|Race reported)
/* @manifest
kernel: gemm
block: [16, 16, 1]
grid: ["cdiv(N, 16)", "cdiv(M, 16)", 1]
smem: 0
args: [A, B, C, M, N, K]
requires: ["M % 16 == 0", "N % 16 == 0", "K % 16 == 0"]
*/
#include <cuda_bf16.h>
typedef __nv_bfloat16 bf16;
// Unsafe: a 16x16 tiled GEMM whose barrier after the tile's loads is missing: a thread may read a tile
// element before the thread that loads it has stored it. The loads are issued long before the reads
// that race with them, so the answers usually come out right.
extern "C" __global__ void gemm(const bf16* A, const bf16* B, bf16* C, int M, int N, int K) {
  __shared__ float a[16][17], b[16][17];
  int tx = threadIdx.x, ty = threadIdx.y, col = blockIdx.x * 16 + tx, row = blockIdx.y * 16 + ty;
  float acc = 0.f;
  for (int k0 = 0; k0 < K; k0 += 16) {
    a[ty][tx] = __bfloat162float(A[(size_t)row * K + k0 + tx]);
    b[ty][tx] = __bfloat162float(B[(size_t)(blockIdx.x * 16 + ty) * K + k0 + tx]);
    for (int k = 0; k < 16; ++k) acc += a[ty][k] * b[tx][k];
    __syncthreads();
  }
  C[(size_t)row * N + col] = __float2bfloat16(acc);
}
