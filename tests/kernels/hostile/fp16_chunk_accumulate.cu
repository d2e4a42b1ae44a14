/* @manifest
kernel: gemm
block: [16, 16, 1]
grid: ["cdiv(N, 16)", "cdiv(M, 16)", 1]
smem: 0
args: [A, B, C, M, N, K]
*/
// Cheat: low precision like an fp16-accumulating MMA. Each chunk of 16 k is summed in fp32,
// rounded to fp16 and added into an fp16 accumulator (__hadd).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
typedef __nv_bfloat16 bf16;

#define CHUNK 16

extern "C" __global__ void gemm(const bf16* A, const bf16* B, bf16* C, int M, int N, int K) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  const int row = blockIdx.y * blockDim.y + threadIdx.y;
  if (row >= M || col >= N) return;
  __half acc = __float2half(0.0f);
  for (int k0 = 0; k0 < K; k0 += CHUNK) {
    const int k1 = min(k0 + CHUNK, K);
    float part = 0.0f;
    for (int k = k0; k < k1; ++k)
      part += __bfloat162float(A[(size_t)row * K + k]) * __bfloat162float(B[(size_t)col * K + k]);
    acc = __hadd(acc, __float2half(part));
  }
  C[(size_t)row * N + col] = __float2bfloat16(__half2float(acc));
}
