/* @manifest
launches:
  - kernel: softmax_naive
    grid: ["cdiv(batch_size, 32)", 1, 1]
    block: [32, 1, 1]
    smem: 0
    args: [x, out, batch_size, dim]
outputs: {out: {shape: [batch_size, dim], dtype: float32}}
*/
// The seed: one thread per row, three passes over the row straight from global memory (its maximum,
// the sum of exp(x - max), then exp(x - max) / sum written out). Neighbouring threads walk neighbouring
// rows, so every load is scattered; each thread's next elements usually hit in L1. The sum is fp32 in
// two levels, 32-element partials added to the row's total: one running sum of 16384 terms drifts
// past the 1e-5 tolerance where the row holds a few repeated values (each addition rounds the same way).
#include <math.h>

extern "C" __global__ void softmax_naive(const float* __restrict__ x, float* __restrict__ out, int rows,
                                         int dim) {
  const int row = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const float* xr = x + (size_t)row * dim;
  float* yr = out + (size_t)row * dim;
  float m = -INFINITY;
  for (int j = 0; j < dim; ++j) m = fmaxf(m, xr[j]);
  float s = 0.0f;
  for (int j0 = 0; j0 < dim; j0 += 32) {
    const int end = min(j0 + 32, dim);
    float part = 0.0f;
    for (int j = j0; j < end; ++j) part += expf(xr[j] - m);
    s += part;
  }
  const float inv = 1.0f / s;
  for (int j = 0; j < dim; ++j) yr[j] = expf(xr[j] - m) * inv;
}
