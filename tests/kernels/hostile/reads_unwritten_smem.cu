/* @manifest
kernel: gemm
block: [16, 16, 1]
grid: ["cdiv(N, 16)", "cdiv(M, 16)", 1]
smem: 0
args: [A, B, C, M, N, K]
*/
#include <cuda_bf16.h>
typedef __nv_bfloat16 bf16;
// Reads shared memory that nothing wrote: each thread adds 0 × a slot of a scratch array it never
// filled. Right while that memory holds finite values (no memory checker sees such a read); the harness
// sets every SM's shared memory to NaN before each checked launch, so the outputs come out NaN.
extern "C" __global__ void gemm(const bf16* A, const bf16* B, bf16* C, int M, int N, int K) {
  __shared__ float pad[256];
  int col = blockIdx.x * 16 + threadIdx.x, row = blockIdx.y * 16 + threadIdx.y;
  float acc = 0.f;
  if (row < M && col < N)
    for (int k = 0; k < K; ++k) acc += __bfloat162float(A[(size_t)row * K + k]) * __bfloat162float(B[(size_t)col * K + k]);
  if (K < 0) pad[threadIdx.y * 16 + threadIdx.x] = 1.f;  // never at run time: the compiler cannot fold the read
  __syncthreads();
  acc += 0.f * pad[threadIdx.y * 16 + threadIdx.x];
  if (row < M && col < N) C[(size_t)row * N + col] = __float2bfloat16(acc);
}
