// expect: incorrect: 1024 of 2048 elements unwritten
/* @manifest
launches:
  - kernel: rowsum
    grid: ["batch_size // 2", 1, 1]
    block: [256, 1, 1]
    args: [x, out, dim]
outputs: {out: {shape: [batch_size], dtype: float32}}
requires: ["dim % 4 == 0"]
*/
// Cheat: sums only the first half of the rows, right, in half the time. A checker that spot-checks
// the first few outputs (out[:8] against the reference's) sees only correct values; the rows it
// skips keep the harness's poison.
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
  if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}
