// expect-sanitize: synccheck: (Barrier error|[Dd]ivergent)
/* @manifest
kernel: gemm
block: [16, 16, 1]
grid: ["cdiv(N, 16)", "cdiv(M, 16)", 1]
smem: 0
args: [A, B, C, M, N, K]
*/
#include <cuda_bf16.h>
typedef __nv_bfloat16 bf16;
// Unsafe: a barrier inside a branch that half of each warp takes, which CUDA leaves undefined; on
// today's GPUs the block usually gets through, with the right answer.
extern "C" __global__ void gemm(const bf16* A, const bf16* B, bf16* C, int M, int N, int K) {
  int col = blockIdx.x * 16 + threadIdx.x, row = blockIdx.y * 16 + threadIdx.y;
  float acc = 0.f;
  if (row < M && col < N)
    for (int k = 0; k < K; ++k) acc += __bfloat162float(A[(size_t)row * K + k]) * __bfloat162float(B[(size_t)col * K + k]);
  if (threadIdx.x % 2 == 0) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  if (row < M && col < N) C[(size_t)row * N + col] = __float2bfloat16(acc);
}
