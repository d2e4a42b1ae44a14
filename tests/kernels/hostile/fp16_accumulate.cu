/* @manifest
kernel: gemm
block: [16, 16, 1]
grid: ["cdiv(N, 16)", "cdiv(M, 16)", 1]
smem: 0
args: [A, B, C, M, N, K]
*/
// Cheat: low precision. Converts every operand to fp16 and accumulates in an fp16 register with
// __hfma (loses range below 2^-24 / above 65504 and rounds every partial sum to 11 bits).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
typedef __nv_bfloat16 bf16;

extern "C" __global__ void gemm(const bf16* A, const bf16* B, bf16* C, int M, int N, int K) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  const int row = blockIdx.y * blockDim.y + threadIdx.y;
  if (row >= M || col >= N) return;
  __half acc = __float2half(0.0f);
  for (int k = 0; k < K; ++k) {
    const __half a = __float2half(__bfloat162float(A[(size_t)row * K + k]));
    const __half b = __float2half(__bfloat162float(B[(size_t)col * K + k]));
    acc = __hfma(a, b, acc);
  }
  C[(size_t)row * N + col] = __float2bfloat16(__half2float(acc));
}
