/* @manifest
kernel: gemm
block: [128, 1, 1]
grid: ["cdiv(N, 32)", "M", 1]
smem: 0
args: [A, B, C, M, N, K]
*/
// Honest, in another summation order: each of 4 warps sums a quarter of K for the same 32 outputs
// (fp32), and the four partial sums are added in fp32 at the end (split-K inside a block).
#include <cuda_bf16.h>
typedef __nv_bfloat16 bf16;
extern "C" __global__ void gemm(const bf16* A, const bf16* B, bf16* C, int M, int N, int K) {
  __shared__ float part[4][32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row = blockIdx.y, col = blockIdx.x * 32 + lane;
  const int per = (K + 3) / 4, k0 = warp * per, k1 = min(K, k0 + per);
  float acc = 0.f;
  if (col < N)
    for (int k = k0; k < k1; ++k) acc += __bfloat162float(A[(size_t)row * K + k]) * __bfloat162float(B[(size_t)col * K + k]);
  part[warp][lane] = acc;
  __syncthreads();
  if (warp == 0 && col < N)
    C[(size_t)row * N + col] = __float2bfloat16(((part[0][lane] + part[1][lane]) + part[2][lane]) + part[3][lane]);
}
