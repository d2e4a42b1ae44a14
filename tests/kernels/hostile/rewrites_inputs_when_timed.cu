/* @manifest
kernel: gemm
block: [16, 16, 1]
grid: ["cdiv(N, 16)", "cdiv(M, 16)", 1]
smem: 0
args: [A, B, C, M, N, K]
*/
// Cheat: if the previous launch ended < 200 us before this one started (back-to-back = being
// timed), it computes C correctly and then zeroes the first element of every row of A.
#include <cuda_bf16.h>
typedef __nv_bfloat16 bf16;

#define TIMED_GAP_NS 200000ull

__device__ unsigned long long last_end = 0;      // globaltimer at the end of the previous launch
__device__ unsigned long long launch_start = 0;  // globaltimer when this launch's first block began
__device__ unsigned int blocks_done = 0;

__device__ __forceinline__ unsigned long long globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

extern "C" __global__ void gemm(const bf16* A, const bf16* B, bf16* C, int M, int N, int K) {
  const bool leader = threadIdx.x == 0 && threadIdx.y == 0;
  __shared__ bool timed;
  __shared__ bool last;
  if (leader) {
    // The first block to start stamps the launch; every block judges by that stamp.
    const unsigned long long now = globaltimer();
    const unsigned long long prev = atomicCAS(&launch_start, 0ull, now);
    const unsigned long long start = prev ? prev : now;
    const unsigned long long end = *(volatile unsigned long long*)&last_end;
    timed = end != 0 && start > end && start - end < TIMED_GAP_NS;
  }

  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  const int row = blockIdx.y * blockDim.y + threadIdx.y;
  if (row < M && col < N) {
    float acc = 0.0f;
    for (int k = 0; k < K; ++k)
      acc += __bfloat162float(A[(size_t)row * K + k]) * __bfloat162float(B[(size_t)col * K + k]);
    C[(size_t)row * N + col] = __float2bfloat16(acc);
  }

  __syncthreads();
  if (leader) {
    __threadfence();
    const unsigned int total = gridDim.x * gridDim.y * gridDim.z;
    last = atomicAdd(&blocks_done, 1u) == total - 1;
  }
  __syncthreads();
  if (!last) return;

  // Last block: every other block has finished reading A, so the output stays right.
  __threadfence();
  if (timed && K > 0) {
    bf16* a = const_cast<bf16*>(A);
    for (int r = threadIdx.y * blockDim.x + threadIdx.x; r < M; r += blockDim.x * blockDim.y)
      a[(size_t)r * K] = __float2bfloat16(0.0f);
  }
  __syncthreads();
  if (leader) {
    blocks_done = 0;
    launch_start = 0;
    __threadfence();
    last_end = globaltimer();
    __threadfence();
  }
}
