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
// Unsafe: the last five steps of the block's tree run "warp-synchronously", with no barrier between a
// lane's write and another lane's read of shared memory. It relies on a warp's lanes moving in lock
// step, which no GPU since Volta promises: a race that usually gives the right answer.
#define THREADS 256

extern "C" __global__ void __launch_bounds__(THREADS) rowsum(const float* __restrict__ x, float* __restrict__ out,
                                                             int dim) {
  __shared__ float partial[THREADS];
  const float* row = x + (size_t)blockIdx.x * dim;
  float sum = 0.f;
  for (int i = threadIdx.x; i < dim; i += THREADS) sum += row[i];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int s = THREADS / 2; s > 32; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x < 32) {
    volatile float* p = partial;
    p[threadIdx.x] += p[threadIdx.x + 32];
    p[threadIdx.x] += p[threadIdx.x + 16];
    p[threadIdx.x] += p[threadIdx.x + 8];
    p[threadIdx.x] += p[threadIdx.x + 4];
    p[threadIdx.x] += p[threadIdx.x + 2];
    p[threadIdx.x] += p[threadIdx.x + 1];
  }
  if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}
