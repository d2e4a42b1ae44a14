// expect: rejected: output 'out': the manifest declares float32 \[2048, 1\], the reference returns float32 \[2048\]
/* @manifest
launches:
  - kernel: rowsum
    grid: [batch_size, 1, 1]
    block: [256, 1, 1]
    args: [x, out, dim]
outputs: {out: {shape: [batch_size, 1], dtype: float32}}
requires: ["dim % 4 == 0"]
*/
// Right sums in the wrong shape: the manifest declares the output as sum(dim=1, keepdim=True) would
// return it, [batch_size, 1]. The same 2048 floats in memory, so a checker that compares flattened
// buffers passes it, but a caller of the module gets a tensor of another shape. The harness refuses
// the manifest before anything runs, against the shapes the reference returned when it was probed.
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
