/* @manifest
launches:
  - kernel: bias_gelu_naive
    grid: ["cdiv(batch_size * features, 256)", 1, 1]
    block: [256, 1, 1]
    smem: 0
    args: [x, bias, out, {i64: "batch_size * features"}, features]
outputs: {out: {shape: [batch_size, features], dtype: float32}}
*/
// The seed: one thread per element, 4-byte loads and stores: v = x + bias[column], then the exact GELU
// v * 0.5 * (1 + erf(v / sqrt(2))) in fp32, as PyTorch computes it.

extern "C" __global__ void bias_gelu_naive(const float* __restrict__ x, const float* __restrict__ bias,
                                           float* __restrict__ out, long long n, int features) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = x[i] + bias[i % features];
  out[i] = v * 0.5f * (1.0f + erff(v * 0.70710678118654752440f));
}
