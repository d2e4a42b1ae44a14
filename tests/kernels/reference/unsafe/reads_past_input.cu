// expect-sanitize: memcheck: Invalid __global__ read
/* @manifest
launches:
  - kernel: rowsum
    grid: [batch_size, 1, 1]
    block: [256, 1, 1]
    args: [x, out, dim]
outputs: {out: {shape: [batch_size], dtype: float32}}
requires: ["dim % 4 == 0"]
*/
// Unsafe: the right sums, but every row also loads the 64 floats that follow it, past the end of the
// input for the last row (a tail loop that rounds up). The values are used only where they could
// never matter, so every output is right and no guard zone changes: only a memory checker sees it.
#define THREADS 256

extern "C" __global__ void __launch_bounds__(THREADS) rowsum(const float* __restrict__ x, float* __restrict__ out,
                                                             int dim) {
  __shared__ float partial[THREADS];
  const float* row = x + (size_t)blockIdx.x * dim;
  float sum = 0.f;
  for (int i = threadIdx.x; i < dim; i += THREADS) sum += row[i];
  float tail = threadIdx.x < 64 ? row[dim + threadIdx.x] : 0.f;
  if (tail == 1.17549435e-38f) sum += 1e-30f;  // never on these inputs' bits, but the load must happen
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int s = THREADS / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}
