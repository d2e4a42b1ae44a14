// expect-sanitize: memcheck: Invalid __global__ write
/* @manifest
kernel: gemm
block: [16, 16, 1]
grid: ["cdiv(N, 16)", "cdiv(M, 16)", 1]
smem: 0
args: [A, B, C, M, N, K]
*/
#include <cuda_bf16.h>
typedef __nv_bfloat16 bf16;
// Unsafe: right answers, and one write 1 MiB past the end of C, far past its guard zones. Where the
// buffers are allocations of their own, those bytes may belong to the next one, which memcheck alone
// takes for an access inside an allocation: its padding after every allocation is what catches it.
extern "C" __global__ void gemm(const bf16* A, const bf16* B, bf16* C, int M, int N, int K) {
  int col = blockIdx.x * 16 + threadIdx.x, row = blockIdx.y * 16 + threadIdx.y;
  if (row >= M || col >= N) return;
  float acc = 0.f;
  for (int k = 0; k < K; ++k) acc += __bfloat162float(A[(size_t)row * K + k]) * __bfloat162float(B[(size_t)col * K + k]);
  C[(size_t)row * N + col] = __float2bfloat16(acc);
  if (row == M - 1 && col == N - 1) C[(size_t)M * N + (1 << 19)] = __float2bfloat16(acc);
}
