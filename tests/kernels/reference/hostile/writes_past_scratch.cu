// expect: incorrect: wrote \d+ bytes past the end of partial
/* @manifest
launches:
  - kernel: rowsum
    grid: [batch_size, 1, 1]
    block: [256, 1, 1]
    args: [x, partial, out, dim]
outputs: {out: {shape: [batch_size], dtype: float32}}
scratch: {partial: {shape: [batch_size], dtype: float32}}
requires: ["dim % 4 == 0"]
*/
// Cheat: the right sums, through a scratch buffer one float per row, but every block also writes its
// row's sum 4 KiB further on (an off-by-stride index): past the end of the scratch buffer.
#define THREADS 256

extern "C" __global__ void __launch_bounds__(THREADS) rowsum(const float* __restrict__ x, float* partial,
                                                             float* __restrict__ out, int dim) {
  __shared__ float tree[THREADS];
  const float* row = x + (size_t)blockIdx.x * dim;
  float sum = 0.f;
  for (int i = threadIdx.x; i < dim; i += THREADS) sum += row[i];
  tree[threadIdx.x] = sum;
  __syncthreads();
  for (int s = THREADS / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) tree[threadIdx.x] += tree[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    partial[blockIdx.x] = tree[0];
    partial[gridDim.x + 1024 + blockIdx.x % 64] = tree[0];
    out[blockIdx.x] = partial[blockIdx.x];
  }
}
