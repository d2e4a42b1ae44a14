// expect-sanitize: memcheck: Invalid __global__ write
/* @manifest
launches:
  - kernel: rowsum
    grid: [batch_size, 1, 1]
    block: [256, 1, 1]
    args: [x, out, dim]
outputs: {out: {shape: [batch_size], dtype: float32}}
requires: ["dim % 4 == 0"]
*/
// Unsafe: the right sums, and one write 1 MiB past the end of the output, far past its guard zones.
// Where each buffer is an allocation of its own those bytes may belong to the next one, which memcheck
// alone takes for an access inside an allocation: its padding after every allocation is what catches it.
#define THREADS 256

extern "C" __global__ void __launch_bounds__(THREADS) rowsum(const float* __restrict__ x, float* __restrict__ out,
                                                             int dim) {
  __shared__ float partial[THREADS];
  const float* row = x + (size_t)blockIdx.x * dim;
  float sum = 0.f;
  for (int i = threadIdx.x; i < dim; i += THREADS) sum += row[i];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int s = THREADS / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
  if (threadIdx.x == 0 && blockIdx.x == gridDim.x - 1) out[gridDim.x + (1 << 18)] = partial[0];
}
