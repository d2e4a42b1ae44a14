/* @manifest
kernel: gemm
block: [64, 1, 1]
grid: ["cdiv(N, 32)", "M", 1]
smem: 0
args: [A, B, C, M, N, K]
*/
// Bug, not a cheat: two warps split each output's K-sum and swap halves through shared memory
// with no __syncthreads between write and read, so the result depends on warp scheduling.
#include <cuda_bf16.h>
typedef __nv_bfloat16 bf16;

extern "C" __global__ void gemm(const bf16* A, const bf16* B, bf16* C, int M, int N, int K) {
  __shared__ float partner[32];  // deliberately never initialized
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int col = blockIdx.x * 32 + lane;
  const int row = blockIdx.y;
  if (row >= M || col >= N) return;
  // Warp 1 gets the longer half so that it usually finishes after warp 0 reads.
  const int split = max(K / 2 - 16, 0);
  const int k0 = warp == 0 ? 0 : split;
  const int k1 = warp == 0 ? split : K;
  float acc = 0.0f;
  for (int k = k0; k < k1; ++k)
    acc += __bfloat162float(A[(size_t)row * K + k]) * __bfloat162float(B[(size_t)col * K + k]);
  volatile float* p = partner;
  if (warp == 1) {
    p[lane] = acc;  // may land after warp 0 has already read
  } else {
    C[(size_t)row * N + col] = __float2bfloat16(acc + p[lane]);  // no barrier: races with warp 1
  }
}
