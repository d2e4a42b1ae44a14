// expect-sanitize: racecheck: (hazard|Race reported)
/* @manifest
launches:
  - kernel: rowsum
    grid: [batch_size, 1, 1]
    block: [256, 1, 1]
    args: [x, out, dim]
outputs: {out: {shape: [batch_size], dtype: float32}}
requires: ["dim % 4 == 0"]
*/
// Unsafe: the barrier between the partial sums' stores and the tree's first reads is missing. Each
// thread's read of another's partial sum races with that thread's store; it usually lands late enough
// to be right, because every warp stores before any reaches the tree.
#define THREADS 256

extern "C" __global__ void __launch_bounds__(THREADS) rowsum(const float* __restrict__ x, float* __restrict__ out,
                                                             int dim) {
  __shared__ float partial[THREADS];
  const float* row = x + (size_t)blockIdx.x * dim;
  float sum = 0.f;
  for (int i = threadIdx.x; i < dim; i += THREADS) sum += row[i];
  partial[threadIdx.x] = sum;
  for (int s = THREADS / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}
