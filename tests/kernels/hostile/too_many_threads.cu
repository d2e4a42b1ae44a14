/* @manifest
kernel: gemm
block: [64, 32, 1]
grid: ["cdiv(N, 64)", "cdiv(M, 32)", 1]
smem: 0
args: [A, B, C, M, N, K]
*/
// Not a cheat but an impossible launch: 64 x 32 = 2048 threads per block, over the limit of 1024.
// The body is the honest naive kernel.
#include <cuda_bf16.h>
typedef __nv_bfloat16 bf16;

extern "C" __global__ void gemm(const bf16* A, const bf16* B, bf16* C, int M, int N, int K) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  const int row = blockIdx.y * blockDim.y + threadIdx.y;
  if (row >= M || col >= N) return;
  float acc = 0.0f;
  for (int k = 0; k < K; ++k)
    acc += __bfloat162float(A[(size_t)row * K + k]) * __bfloat162float(B[(size_t)col * K + k]);
  C[(size_t)row * N + col] = __float2bfloat16(acc);
}
