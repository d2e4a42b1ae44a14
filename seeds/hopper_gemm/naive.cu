/* @manifest
kernel: gemm
tile: [16, 16]
block: [16, 16, 1]
grid: ["cdiv(N, 16)", "cdiv(M, 16)", 1]
smem: 0
args: [A, B, C, M, N, K]
*/
// The seed: one thread per output element, fp32 accumulation, every operand read
// straight from global memory. C = A * B^T with A (M x K), B (N x K), C (M x N),
// all row-major bf16.
#include <cuda_bf16.h>

extern "C" __global__ void gemm(const __nv_bfloat16* __restrict__ A,
                                const __nv_bfloat16* __restrict__ B,
                                __nv_bfloat16* __restrict__ C, int M, int N, int K) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  const int row = blockIdx.y * blockDim.y + threadIdx.y;
  if (row >= M || col >= N) return;
  float acc = 0.0f;
  for (int k = 0; k < K; ++k) {
    acc += __bfloat162float(A[(size_t)row * K + k]) * __bfloat162float(B[(size_t)col * K + k]);
  }
  C[(size_t)row * N + col] = __float2bfloat16(acc);
}
