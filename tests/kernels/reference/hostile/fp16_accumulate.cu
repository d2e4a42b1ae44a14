// expect: incorrect: relative error .* over the tolerance .*\(own draw\)
/* @manifest
launches:
  - kernel: rowsum
    grid: [batch_size, 1, 1]
    block: [256, 1, 1]
    args: [x, out, dim]
outputs: {out: {shape: [batch_size], dtype: float32}}
requires: ["dim % 4 == 0"]
*/
// Cheat: the whole sum in half precision: each float4 is rounded to two __half2 and added with
// __hadd2 (twice the adds an instruction), the block's tree in __half too. Every element loses its
// low 13 mantissa bits on the way in and every partial sum rounds to 11 bits, so a row sum of normal
// data (about 64 in size) is off by about 0.05: a relative error near 1e-3, where fp32 accumulation
// in any order stays under 1e-6. Within a loose allclose(rtol=1e-2) it passes; on data offset by 100
// (the harness's "offset" draw) its sums would overflow to inf. The harness's fp32 tolerance (1e-5)
// refuses it on the first draw.
#include <cuda_fp16.h>
#define THREADS 256

extern "C" __global__ void __launch_bounds__(THREADS) rowsum(const float* __restrict__ x, float* __restrict__ out,
                                                             int dim) {
  __shared__ __half2 partial[THREADS];
  const float4* row = reinterpret_cast<const float4*>(x + (size_t)blockIdx.x * dim);
  __half2 sum = __float2half2_rn(0.f);
  for (int i = threadIdx.x; i < dim / 4; i += THREADS) {
    float4 v = __ldg(row + i);
    sum = __hadd2(sum, __hadd2(__floats2half2_rn(v.x, v.y), __floats2half2_rn(v.z, v.w)));
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int s = THREADS / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] = __hadd2(partial[threadIdx.x], partial[threadIdx.x + s]);
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = __half2float(__hadd(__low2half(partial[0]), __high2half(partial[0])));
}
