// expect: incorrect: 2048 of 2048 elements unwritten
/* @manifest
launches:
  - kernel: rowsum
    grid: [batch_size, 1, 1]
    block: [256, 1, 1]
    args: [x, out, dim]
outputs: {out: {shape: [batch_size], dtype: float32}}
requires: ["dim % 4 == 0"]
*/
// Cheat: reads every row (so it takes a believable time) and stores nothing. Where the checker runs
// the reference first and then allocates the output with torch.empty, the caching allocator tends to
// hand back the very block the reference's answer was just freed from, and the answer is "there".
// The harness poisons every output before every launch: each element still holding the poison was
// never written.
#define THREADS 256

extern "C" __global__ void __launch_bounds__(THREADS) rowsum(const float* __restrict__ x, float* __restrict__ out,
                                                             int dim) {
  __shared__ float partial[THREADS];
  const float4* row = reinterpret_cast<const float4*>(x + (size_t)blockIdx.x * dim);
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
  // The store sits behind a test no real data passes, so the loads above are not optimized away.
  if (threadIdx.x == 0 && partial[0] == -1234567.f) out[blockIdx.x] = partial[0];
}
