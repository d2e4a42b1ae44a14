/* @manifest
launches:
  - kernel: sum_naive
    grid: ["cdiv(batch_size * dim2, 256)", 1, 1]
    block: [256, 1, 1]
    smem: 0
    args: [x, out, batch_size, dim1, dim2]
outputs: {out: {shape: [batch_size, 1, dim2], dtype: float32}}
requires: ["reduce_dim == 1"]
*/
// The seed: one thread per output (batch b, column j), summing x[b, i, j] over i in order in one fp32
// accumulator. Neighbouring threads take neighbouring columns, so every load is coalesced, but each
// thread has only the few loads in flight that the compiler unrolls.

extern "C" __global__ void sum_naive(const float* __restrict__ x, float* __restrict__ out, int batch, int dim1,
                                     int dim2) {
  const int o = blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= batch * dim2) return;
  const int b = o / dim2, j = o % dim2;
  const float* p = x + (size_t)b * dim1 * dim2 + j;
  float s = 0.0f;
  for (int i = 0; i < dim1; ++i) s += p[(size_t)i * dim2];
  out[o] = s;
}
