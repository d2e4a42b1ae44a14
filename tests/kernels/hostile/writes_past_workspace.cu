/* @manifest
kernel: gemm
block: [16, 16, 1]
grid: ["cdiv(N, 16)", "cdiv(M, 16)", 1]
smem: 0
args: [A, B, C, W, M, N, K]
workspace: "4 * M"
*/
#include <cuda_bf16.h>
typedef __nv_bfloat16 bf16;
// Right answer; each row's last element is also kept in a workspace of one float a row, but at an
// index off by M: every write lands past the end of the workspace. The guard zone after W sees it.
extern "C" __global__ void gemm(const bf16* A, const bf16* B, bf16* C, float* W, int M, int N, int K) {
  int col = blockIdx.x * 16 + threadIdx.x, row = blockIdx.y * 16 + threadIdx.y;
  if (row >= M || col >= N) return;
  float acc = 0.f;
  for (int k = 0; k < K; ++k) acc += __bfloat162float(A[(size_t)row * K + k]) * __bfloat162float(B[(size_t)col * K + k]);
  C[(size_t)row * N + col] = __float2bfloat16(acc);
  if (col == N - 1) W[M + row % 1024] = acc;
}
