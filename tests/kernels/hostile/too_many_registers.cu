/* @manifest
kernel: gemm
block: [1024, 1, 1]
grid: ["cdiv(M * cdiv(N, 64), 1024)", 1, 1]
smem: 0
args: [A, B, C, M, N, K]
*/
// Not a cheat but an impossible launch: each thread keeps 64 fp32 accumulators in registers
// (>64 registers/thread), so a 1024-thread block needs more than the 65536 registers of an SM.
#include <cuda_bf16.h>
typedef __nv_bfloat16 bf16;

#define COLS 64

extern "C" __global__ void gemm(const bf16* A, const bf16* B, bf16* C, int M, int N, int K) {
  // Thread t computes row t / nb, columns [64 * (t % nb), 64 * (t % nb) + 64).
  const int nb = (N + COLS - 1) / COLS;
  const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= (long long)M * nb) return;
  const int row = (int)(t / nb);
  const int col0 = (int)(t % nb) * COLS;
  float acc[COLS];
#pragma unroll
  for (int j = 0; j < COLS; ++j) acc[j] = 0.0f;
  for (int k = 0; k < K; ++k) {
    const float a = __bfloat162float(A[(size_t)row * K + k]);
#pragma unroll
    for (int j = 0; j < COLS; ++j) {
      const int c = min(col0 + j, N - 1);  // clamp loads; only in-range columns are stored
      acc[j] += a * __bfloat162float(B[(size_t)c * K + k]);
    }
  }
#pragma unroll
  for (int j = 0; j < COLS; ++j)
    if (col0 + j < N) C[(size_t)row * N + col0 + j] = __float2bfloat16(acc[j]);
}
