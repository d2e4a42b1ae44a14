/* @manifest
kernel: gemm
block: [16, 16, 1]
grid: ["cdiv(N, 16)", "cdiv(M, 16)", 1]
smem: 240000
args: [A, B, C, M, N, K]
*/
// Not a cheat but an impossible launch: asks for 240000 bytes of dynamic shared memory, over the
// 232448-byte per-block opt-in limit on Hopper. The body is the honest naive kernel.
#include <cuda_bf16.h>
typedef __nv_bfloat16 bf16;

extern "C" __global__ void gemm(const bf16* A, const bf16* B, bf16* C, int M, int N, int K) {
  extern __shared__ float scratch[];
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  const int row = blockIdx.y * blockDim.y + threadIdx.y;
  const int t = threadIdx.y * blockDim.x + threadIdx.x;
  float acc = 0.0f;
  if (row < M && col < N)
    for (int k = 0; k < K; ++k)
      acc += __bfloat162float(A[(size_t)row * K + k]) * __bfloat162float(B[(size_t)col * K + k]);
  scratch[t] = acc;  // touch the shared memory so it is really used
  __syncthreads();
  if (row < M && col < N) C[(size_t)row * N + col] = __float2bfloat16(scratch[t]);
}
