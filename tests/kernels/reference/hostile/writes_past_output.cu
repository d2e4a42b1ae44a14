// expect: incorrect: wrote \d+ bytes past the end of out
/* @manifest
launches:
  - kernel: rowsum
    grid: [batch_size, 1, 1]
    block: [256, 1, 1]
    args: [x, out, dim]
outputs: {out: {shape: [batch_size], dtype: float32}}
requires: ["dim % 4 == 0"]
*/
// Cheat: the right sums, and 64 KiB of zeros written just past the end of the output. Nothing faults
// where those bytes belong to another live tensor; in a caller's program that tensor is corrupted.
// The harness sees it in the guard zone that follows every buffer a kernel is given.
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
  if (blockIdx.x == 0) {  // 16384 floats past the last row's sum
    float* past = out + gridDim.x;
    for (int i = threadIdx.x; i < 16384; i += THREADS) past[i] = 0.f;
  }
}
