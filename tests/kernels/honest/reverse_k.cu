/* @manifest
kernel: gemm
block: [16, 16, 1]
grid: ["cdiv(N, 16)", "cdiv(M, 16)", 1]
smem: 0
args: [A, B, C, M, N, K]
*/
// Honest, in another summation order: one thread per output, fp32, k from K-1 down to 0,
// with fused multiply-adds.
#include <cuda_bf16.h>
typedef __nv_bfloat16 bf16;
extern "C" __global__ void gemm(const bf16* A, const bf16* B, bf16* C, int M, int N, int K) {
  int col = blockIdx.x * 16 + threadIdx.x, row = blockIdx.y * 16 + threadIdx.y;
  if (row >= M || col >= N) return;
  float acc = 0.f;
  for (int k = K - 1; k >= 0; --k) acc = fmaf(__bfloat162float(A[(size_t)row * K + k]), __bfloat162float(B[(size_t)col * K + k]), acc);
  C[(size_t)row * N + col] = __float2bfloat16(acc);
}
