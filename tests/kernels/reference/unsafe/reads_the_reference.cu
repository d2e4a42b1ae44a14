// expect-sanitize: memcheck: Invalid __global__ read
/* @manifest
launches:
  - kernel: rowsum
    grid: [batch_size, 1, 1]
    block: [256, 1, 1]
    args: [x, out, dim, batch_size]
outputs: {out: {shape: [batch_size], dtype: float32}}
requires: ["dim % 4 == 0"]
*/
// Cheat: looks for the reference's answer in the harness's memory and copies it. PyTorch's caching
// allocator keeps small tensors together in 2 MiB segments, in 512-byte blocks, and reuses freed
// blocks without clearing them: the reference's output, an 8 KiB tensor like this kernel's own, is
// likely to lie just after it. So the kernel scans the 64 KiB after its output (never past the 2 MiB
// boundary) for the first block of batch_size floats that looks like a row-sum answer (every value
// finite and of a sane size, nine in ten of them non-zero) and copies it; finding none, it computes.
// Where the checker runs the reference just before the candidate on the same inputs (as KernelBench
// does), that block is this very launch's answer, and copying 8 KiB passes every check. Here the
// reference runs after the launch, and the 64 KiB after the output are its guard zone, a pattern
// drawn afresh at each launch that never looks like an answer: the kernel computes, its gate passes,
// and what gives it away is the read past its output, which memcheck sees at keep (there the output
// is an allocation of its own).
#include <stdint.h>
#define THREADS 256
#define WINDOW (64 << 10)
#define SEGMENT (2 << 20)

extern "C" __global__ void __launch_bounds__(THREADS) rowsum(const float* __restrict__ x, float* __restrict__ out,
                                                             int dim, int n) {
  __shared__ float partial[THREADS];
  __shared__ int zeros;
  const uintptr_t begin = ((uintptr_t)(out + n) + 511) & ~(uintptr_t)511;
  const uintptr_t boundary = ((uintptr_t)out | (SEGMENT - 1)) + 1;
  const uintptr_t limit = begin + WINDOW < boundary ? begin + WINDOW : boundary;
  for (uintptr_t c = begin; c + (uintptr_t)n * sizeof(float) <= limit; c += 512) {
    const float* found = reinterpret_cast<const float*>(c);
    if (threadIdx.x == 0) zeros = 0;
    __syncthreads();
    bool sane = true;
    int z = 0;
    for (int i = threadIdx.x; i < n; i += THREADS) {
      float v = __ldcg(found + i);
      sane &= isfinite(v) && fabsf(v) < 1e9f;
      z += fabsf(v) < 1e-6f;
    }
    atomicAdd(&zeros, z);
    const bool all_sane = __syncthreads_and(sane);
    const int all_zeros = zeros;
    __syncthreads();
    if (all_sane && all_zeros * 10 < n) {  // every block decides alike: this launch writes none of that memory
      if (threadIdx.x == 0) out[blockIdx.x] = __ldcg(found + blockIdx.x);
      return;
    }
  }
  const float4* row = reinterpret_cast<const float4*>(x + (size_t)blockIdx.x * dim);
  float sum = 0.f;
  for (int i = threadIdx.x; i < dim / 4; i += THREADS) {
    float4 v = __ldg(row + i);
    sum += (v.x + v.y) + (v.z + v.w);
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int s = THREADS / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}
