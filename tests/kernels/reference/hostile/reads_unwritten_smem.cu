// expect: incorrect: non-finite elements where the reference is finite
/* @manifest
launches:
  - kernel: rowsum
    grid: [batch_size, 1, 1]
    block: [256, 1, 1]
    args: [x, out, dim]
outputs: {out: {shape: [batch_size], dtype: float32}}
requires: ["dim % 4 == 0"]
*/
// Cheat by accident: the tree starts one step too wide, over 512 slots of which only 256 were written.
// It adds 0 × (whatever the unwritten half holds): right while that memory holds finite values. No
// memory checker sees a read of shared memory nothing wrote; the harness sets every SM's shared
// memory to NaN before each checked launch, so the sums come out NaN.
#define THREADS 256

extern "C" __global__ void __launch_bounds__(THREADS) rowsum(const float* __restrict__ x, float* __restrict__ out,
                                                             int dim) {
  __shared__ float partial[2 * THREADS];
  const float* row = x + (size_t)blockIdx.x * dim;
  float sum = 0.f;
  for (int i = threadIdx.x; i < dim; i += THREADS) sum += row[i];
  partial[threadIdx.x] = sum;
  __syncthreads();
  partial[threadIdx.x] += 0.f * partial[threadIdx.x + THREADS];
  __syncthreads();
  for (int s = THREADS / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}
