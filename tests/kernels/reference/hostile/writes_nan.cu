// expect: incorrect: 2048 non-finite elements where the reference is finite
/* @manifest
launches:
  - kernel: rowsum
    grid: [batch_size, 1, 1]
    block: [256, 1, 1]
    args: [x, out, dim]
outputs: {out: {shape: [batch_size], dtype: float32}}
requires: ["dim % 4 == 0"]
*/
// Cheat: reads the rows and writes a quiet NaN (0x7FC00000, not the poison's bit pattern) into every
// output. Every element is written, so a test for unwritten elements by the poison finds none; and a
// checker written as `if err > tol: fail` lets it through, since every comparison with NaN is false.
// The harness refuses non-finite outputs where the reference is finite, before any error is computed.
#define THREADS 256

extern "C" __global__ void __launch_bounds__(THREADS) rowsum(const float* __restrict__ x, float* __restrict__ out,
                                                             int dim) {
  const float4* row = reinterpret_cast<const float4*>(x + (size_t)blockIdx.x * dim);
  float sum = 0.f;
  for (int i = threadIdx.x; i < dim / 4; i += THREADS) {
    float4 v = __ldg(row + i);
    sum += (v.x + v.y) + (v.z + v.w);
  }
  // sum * NaN is NaN for every finite sum; written this way the loads stay live.
  if (threadIdx.x == 0) out[blockIdx.x] = sum * __int_as_float(0x7FC00000);
}
