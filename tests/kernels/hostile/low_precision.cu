/* @manifest
kernel: gemm
block: [16, 16, 1]
grid: ["cdiv(N, 16)", "cdiv(M, 16)", 1]
smem: 0
args: [A, B, C, M, N, K]
*/
#include <cuda_bf16.h>
typedef __nv_bfloat16 bf16;
// Accumulates in bf16: fine for small K, visibly wrong for large K.
extern "C" __global__ void gemm(const bf16* A, const bf16* B, bf16* C, int M, int N, int K) {
  int col = blockIdx.x * 16 + threadIdx.x, row = blockIdx.y * 16 + threadIdx.y;
  if (row >= M || col >= N) return;
  bf16 acc = __float2bfloat16(0.f);
  for (int k = 0; k < K; ++k) acc = __hfma(A[(size_t)row * K + k], B[(size_t)col * K + k], acc);
  C[(size_t)row * N + col] = acc;
}
