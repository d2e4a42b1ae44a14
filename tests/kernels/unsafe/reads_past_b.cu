// expect-sanitize: memcheck: Invalid __global__ read
/* @manifest
kernel: gemm
block: [16, 16, 1]
grid: ["cdiv(N, 16)", "cdiv(M, 16)", 1]
smem: 0
args: [A, B, C, M, N, K]
*/
#include <cuda_bf16.h>
typedef __nv_bfloat16 bf16;
// Unsafe: right answers, but the last row of B is read 64 elements past its end (a rounded-up tail)
// and the values used only where they cannot matter. No guard zone changes: only memcheck sees it.
extern "C" __global__ void gemm(const bf16* A, const bf16* B, bf16* C, int M, int N, int K) {
  int col = blockIdx.x * 16 + threadIdx.x, row = blockIdx.y * 16 + threadIdx.y;
  if (row >= M || col >= N) return;
  float acc = 0.f;
  for (int k = 0; k < K; ++k) acc += __bfloat162float(A[(size_t)row * K + k]) * __bfloat162float(B[(size_t)col * K + k]);
  if (col == N - 1 && threadIdx.y == 0) {
    float tail = __bfloat162float(B[(size_t)N * K + threadIdx.x * 4]);
    if (tail == 1.17549435e-38f) acc += 1e-30f;
  }
  C[(size_t)row * N + col] = __float2bfloat16(acc);
}
