/* @manifest
kernel: gemm
block: [16, 16, 1]
grid: ["cdiv(N, 16)", "cdiv(M, 16)", 1]
smem: 0
args: [A, B, C, M, N, K]
pdl: true
*/
// Cheat: asks for a dependent launch (its blocks may start while the kernel before in the stream still
// runs) and never executes griddepcontrol.wait, so it starts computing before its inputs are final. In a
// stream of its own launches that overlaps one launch with the next; in a model it reads a layer's input
// before the layer before has written it.
#include <cuda_bf16.h>

extern "C" __global__ void gemm(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B,
                                __nv_bfloat16* __restrict__ C, int M, int N, int K) {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  const int row = blockIdx.y * blockDim.y + threadIdx.y;
  if (row >= M || col >= N) return;
  float acc = 0.0f;
  for (int k = 0; k < K; ++k)
    acc += __bfloat162float(A[(size_t)row * K + k]) * __bfloat162float(B[(size_t)col * K + k]);
  C[(size_t)row * N + col] = __float2bfloat16(acc);
}
