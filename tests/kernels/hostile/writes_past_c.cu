/* @manifest
kernel: gemm
block: [16, 16, 1]
grid: ["cdiv(N, 16)", "cdiv(M, 16)", 1]
smem: 0
args: [A, B, C, M, N, K]
*/
#include <cuda_bf16.h>
typedef __nv_bfloat16 bf16;
// Right answer, and 64 KiB of zeros just past the end of C: memory that belongs to someone else and
// faults nowhere. The guard zone after C sees it.
extern "C" __global__ void gemm(const bf16* A, const bf16* B, bf16* C, int M, int N, int K) {
  int col = blockIdx.x * 16 + threadIdx.x, row = blockIdx.y * 16 + threadIdx.y;
  if (row < M && col < N) {
    float acc = 0.f;
    for (int k = 0; k < K; ++k) acc += __bfloat162float(A[(size_t)row * K + k]) * __bfloat162float(B[(size_t)col * K + k]);
    C[(size_t)row * N + col] = __float2bfloat16(acc);
  }
  if (blockIdx.x == 0 && blockIdx.y == 0) {
    unsigned* past = reinterpret_cast<unsigned*>(C + (size_t)M * N);
    for (int i = threadIdx.y * 16 + threadIdx.x; i < 16384; i += 256) past[i] = 0u;
  }
}
