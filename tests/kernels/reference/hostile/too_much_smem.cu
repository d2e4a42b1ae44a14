// expect: rejected: \d+ B static \+ 229376 B dynamic shared memory exceed the \d+ B a block may have
/* @manifest
launches:
  - kernel: rowsum
    grid: ["cdiv(batch_size, 14)", 1, 1]
    block: [256, 1, 1]
    smem: "14 * dim * 4"
    args: [x, out, dim, batch_size]
outputs: {out: {shape: [batch_size], dtype: float32}}
requires: ["dim % 4 == 0"]
*/
// A launch the device cannot make: fourteen rows a block, staged whole in dynamic shared memory
// (14 x 16 KiB = 229376 bytes) beside a static table of partial sums (14 x 256 floats, 14336 bytes):
// 243712 bytes in all, where a block of a Hopper GPU may have at most 232448 (227 KiB). Each figure
// alone is within its limit, so only their sum gives it away: the harness refuses it in the
// evaluation child, with the kernel's static size read from the cubin, before the first launch.
#define THREADS 256
#define ROWS 14

extern "C" __global__ void __launch_bounds__(THREADS) rowsum(const float* __restrict__ x, float* __restrict__ out,
                                                             int dim, int n) {
  extern __shared__ float4 staged[];
  __shared__ float partial[ROWS][THREADS];
  const int first = blockIdx.x * ROWS;
  const int rows = min(ROWS, n - first);
  const float4* src = reinterpret_cast<const float4*>(x + (size_t)first * dim);
  for (int i = threadIdx.x; i < rows * dim / 4; i += THREADS) staged[i] = __ldg(src + i);
  __syncthreads();
  for (int r = 0; r < rows; ++r) {
    float sum = 0.f;
    for (int i = threadIdx.x; i < dim / 4; i += THREADS) {
      float4 v = staged[r * (dim / 4) + i];
      sum += (v.x + v.y) + (v.z + v.w);
    }
    partial[r][threadIdx.x] = sum;
  }
  __syncthreads();
  for (int s = THREADS / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s)
      for (int r = 0; r < rows; ++r) partial[r][threadIdx.x] += partial[r][threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x < rows) out[first + threadIdx.x] = partial[threadIdx.x][0];
}
