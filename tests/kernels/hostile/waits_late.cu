/* @manifest
kernel: gemm
block: [16, 16, 1]
grid: ["cdiv(N, 16)", "cdiv(M, 16)", 1]
smem: 0
args: [A, B, C, M, N, K]
pdl: true
*/
// Cheat: a dependent launch that reads the first half of its K range before griddepcontrol.wait and the
// rest after, hoping the early reads are rarely stale.
#include <cuda_bf16.h>

extern "C" __global__ void gemm(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B,
                                __nv_bfloat16* __restrict__ C, int M, int N, int K) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  const int row = blockIdx.y * blockDim.y + threadIdx.y;
  float acc = 0.0f;
  const bool inside = row < M && col < N;
  if (inside)
    for (int k = 0; k < K / 2; ++k)
      acc += __bfloat162float(A[(size_t)row * K + k]) * __bfloat162float(B[(size_t)col * K + k]);
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (!inside) return;
  for (int k = K / 2; k < K; ++k)
    acc += __bfloat162float(A[(size_t)row * K + k]) * __bfloat162float(B[(size_t)col * K + k]);
  C[(size_t)row * N + col] = __float2bfloat16(acc);
}
