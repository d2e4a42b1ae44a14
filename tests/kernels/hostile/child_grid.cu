/* @manifest
kernel: gemm
block: [1, 1, 1]
grid: [1, 1, 1]
smem: 0
args: [A, B, C, M, N, K]
*/
// Cheat: one parent thread launches a fire-and-forget child grid (dynamic parallelism) that does
// the work, and returns at once, so the parent's launch time hides the whole GEMM.
// (Needs -rdc=true and cudadevrt; the harness's plain -cubin build is expected to reject it.)
#include <cuda_bf16.h>
typedef __nv_bfloat16 bf16;

extern "C" __global__ void gemm_child(const bf16* A, const bf16* B, bf16* C, int M, int N, int K) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  const int row = blockIdx.y * blockDim.y + threadIdx.y;
  if (row >= M || col >= N) return;
  float acc = 0.0f;
  for (int k = 0; k < K; ++k)
    acc += __bfloat162float(A[(size_t)row * K + k]) * __bfloat162float(B[(size_t)col * K + k]);
  C[(size_t)row * N + col] = __float2bfloat16(acc);
}

extern "C" __global__ void gemm(const bf16* A, const bf16* B, bf16* C, int M, int N, int K) {
  if (threadIdx.x != 0 || blockIdx.x != 0 || M <= 0 || N <= 0) return;
  const dim3 block(16, 16, 1);
  const dim3 grid((N + 15) / 16, (M + 15) / 16, 1);
  gemm_child<<<grid, block, 0, cudaStreamFireAndForget>>>(A, B, C, M, N, K);
}
