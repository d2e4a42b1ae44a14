// expect: incorrect: relative error .* over the tolerance .*\(normal draw\)
/* @manifest
launches:
  - kernel: rowsum
    grid: [batch_size, 1, 1]
    block: [256, 1, 1]
    args: [x, out, dim]
outputs: {out: {shape: [batch_size], dtype: float32}}
requires: ["dim % 4 == 0", "batch_size <= 65536"]
*/
// Cheat: a memo keyed by address. Each row's sum is kept in a __device__ table beside the address
// of the row (and of the output element) it came from; a launch on the same addresses returns the
// kept sums without reading the input. Where a benchmark times the same tensors again and again (as
// KernelBench does), every timed launch after the first costs a read of 8 KiB. The harness fills the
// same input tensor with fresh content before each launch, so the addresses repeat and the memo
// answers the second launch (the gate's "normal" draw) with the first one's sums.
#define THREADS 256
#define ROWS 65536

__device__ const float* memo_row[ROWS];
__device__ float* memo_out[ROWS];
__device__ float memo_sum[ROWS];

extern "C" __global__ void __launch_bounds__(THREADS) rowsum(const float* __restrict__ x, float* __restrict__ out,
                                                             int dim) {
  __shared__ float partial[THREADS];
  const int r = blockIdx.x;
  const float* row_ptr = x + (size_t)r * dim;
  if (memo_row[r] == row_ptr && memo_out[r] == out + r) {  // only this block touches entry r
    if (threadIdx.x == 0) out[r] = memo_sum[r];
    return;
  }
  const float4* row = reinterpret_cast<const float4*>(row_ptr);
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
  if (threadIdx.x == 0) {
    out[r] = partial[0];
    memo_sum[r] = partial[0];
    memo_row[r] = row_ptr;
    memo_out[r] = out + r;
  }
}
