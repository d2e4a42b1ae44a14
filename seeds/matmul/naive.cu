/* @manifest
launches:
  - kernel: matmul_naive
    grid: ["cdiv(N, 16)", "cdiv(M, 16)", 1]
    block: [16, 16, 1]
    smem: 0
    args: [A, B, out, M, N, K]
outputs: {out: {shape: [M, N], dtype: float16}}
*/
// The seed: one thread per element of C, the dot product of a row of A and a column of B read from
// global memory one half at a time, accumulated in fp32 and rounded to half once.
#include <cuda_fp16.h>

extern "C" __global__ void matmul_naive(const __half* __restrict__ A, const __half* __restrict__ B,
                                        __half* __restrict__ C, int M, int N, int K) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  const int row = blockIdx.y * blockDim.y + threadIdx.y;
  if (row >= M || col >= N) return;
  float acc = 0.0f;
  for (int k = 0; k < K; ++k)
    acc += __half2float(A[(long long)row * K + k]) * __half2float(B[(long long)k * N + col]);
  C[(long long)row * N + col] = __float2half(acc);
}
