/* @manifest
kernel: gemm
block: [16, 16, 1]
grid: ["cdiv(N, 16)", "cdiv(M, 16)", 1]
smem: 0
args: [A, B, C, M, N, K]
*/
// Hang: hot-spins (no __nanosleep) on a device flag that nothing ever sets; it never returns.
#include <cuda_bf16.h>
typedef __nv_bfloat16 bf16;

__device__ int go = 0;

extern "C" __global__ void gemm(const bf16* A, const bf16* B, bf16* C, int M, int N, int K) {
  while (*(volatile int*)&go == 0) {
  }
}
