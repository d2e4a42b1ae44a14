// expect: rejected: a block of 2048 threads \(at most 1024\)
/* @manifest
launches:
  - kernel: rowsum
    grid: [batch_size, 1, 1]
    block: [2048, 1, 1]
    args: [x, out, dim]
outputs: {out: {shape: [batch_size], dtype: float32}}
requires: ["dim % 4 == 0"]
*/
// A launch the device cannot make: one thread for every two elements of the row, 2048 threads a
// block, where a block holds at most 1024. cuLaunchKernel would fail (or, behind a wrapper that does
// not check its result, do nothing and leave whatever the output held). The harness refuses the
// manifest before anything runs.
#define THREADS 2048

extern "C" __global__ void rowsum(const float* __restrict__ x, float* __restrict__ out, int dim) {
  __shared__ float partial[THREADS];
  const float2* row = reinterpret_cast<const float2*>(x + (size_t)blockIdx.x * dim);
  float sum = 0.f;
  for (int i = threadIdx.x; i < dim / 2; i += THREADS) {
    float2 v = __ldg(row + i);
    sum += v.x + v.y;
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int s = THREADS / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}
