/* @manifest
kernel: gemm
block: [16, 16, 1]
grid: ["cdiv(N, 16)", "cdiv(M, 16)", 1]
smem: 0
args: [A, B, C, M, N, K]
*/
// Cheat: honest for its first 12 launches (the gate), then returns at once without writing C.
#include <cuda_bf16.h>
typedef __nv_bfloat16 bf16;

#define HONEST_LAUNCHES 12

__device__ unsigned int launches = 0;
__device__ unsigned int blocks_done = 0;

extern "C" __global__ void gemm(const bf16* A, const bf16* B, bf16* C, int M, int N, int K) {
  // Every thread sees the same count: it only changes when the last block of a launch finishes.
  if (*(volatile unsigned int*)&launches >= HONEST_LAUNCHES) return;

  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  const int row = blockIdx.y * blockDim.y + threadIdx.y;
  if (row < M && col < N) {
    float acc = 0.0f;
    for (int k = 0; k < K; ++k)
      acc += __bfloat162float(A[(size_t)row * K + k]) * __bfloat162float(B[(size_t)col * K + k]);
    C[(size_t)row * N + col] = __float2bfloat16(acc);
  }

  __shared__ bool last;
  __syncthreads();
  if (threadIdx.x == 0 && threadIdx.y == 0) {
    __threadfence();
    const unsigned int total = gridDim.x * gridDim.y * gridDim.z;
    last = atomicAdd(&blocks_done, 1u) == total - 1;
  }
  __syncthreads();
  if (last && threadIdx.x == 0 && threadIdx.y == 0) {
    blocks_done = 0;
    atomicAdd(&launches, 1u);
    __threadfence();
  }
}
