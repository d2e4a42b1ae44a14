/* @manifest
launches:
  - kernel: ln_sum
    grid: [256, batch_size, 1]
    block: [256, 1, 1]
    args: [x, partial, "features * dim1 * dim2"]
  - kernel: ln_sqdev
    grid: [256, batch_size, 1]
    block: [256, 1, 1]
    args: [x, partial, partial2, "features * dim1 * dim2"]
  - kernel: ln_norm
    grid: [256, batch_size, 1]
    block: [256, 1, 1]
    args: [x, ln.weight, ln.bias, partial, partial2, out, "features * dim1 * dim2", {f64: 1.0e-5}]
outputs: {out: {shape: [batch_size, features, dim1, dim2], dtype: float32}}
scratch:
  partial: {shape: [batch_size, 256], dtype: float64}
  partial2: {shape: [batch_size, 256], dtype: float64}
requires: ["(features * dim1 * dim2) % 65536 == 0"]
*/
// LayerNorm over each sample's (features, dim1, dim2) elements, for KernelBench level 1's
// 40_LayerNorm.py (rows of 4,194,304 elements), in two passes and float64 sums: each of 256 blocks a
// row sums its 1/256 of the row, the mean is the sum of those 256 partial sums; the second pass sums
// the squared deviations from that mean the same way (no E[x^2] - E[x]^2 cancellation); the last
// applies (x - mean) / sqrt(var + eps) * weight + bias in float64 and rounds once.
#define THREADS 256
#define CHUNKS 256

__device__ double block_sum(double v, double* shared) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xFFFFFFFFu, v, o);
  if ((threadIdx.x & 31) == 0) shared[threadIdx.x >> 5] = v;
  __syncthreads();
  double total = 0.0;
  for (int w = 0; w < THREADS / 32; ++w) total += shared[w];
  __syncthreads();
  return total;
}

__device__ double row_total(const double* partial) {  // every thread: the row's 256 partial sums, in order
  double s = 0.0;
  for (int i = 0; i < CHUNKS; ++i) s += partial[i];
  return s;
}

extern "C" __global__ void __launch_bounds__(THREADS) ln_sum(const float* __restrict__ x, double* __restrict__ partial,
                                                             int n) {
  __shared__ double shared[THREADS / 32];
  const int chunk = n / CHUNKS;
  const float4* p = reinterpret_cast<const float4*>(x + (size_t)blockIdx.y * n + (size_t)blockIdx.x * chunk);
  double s = 0.0;
  for (int i = threadIdx.x; i < chunk / 4; i += THREADS) {
    float4 v = p[i];
    s += ((double)v.x + v.y) + ((double)v.z + v.w);
  }
  s = block_sum(s, shared);
  if (threadIdx.x == 0) partial[blockIdx.y * CHUNKS + blockIdx.x] = s;
}

extern "C" __global__ void __launch_bounds__(THREADS) ln_sqdev(const float* __restrict__ x,
                                                               const double* __restrict__ partial,
                                                               double* __restrict__ partial2, int n) {
  __shared__ double shared[THREADS / 32];
  const double mean = row_total(partial + blockIdx.y * CHUNKS) / n;
  const int chunk = n / CHUNKS;
  const float4* p = reinterpret_cast<const float4*>(x + (size_t)blockIdx.y * n + (size_t)blockIdx.x * chunk);
  double s = 0.0;
  for (int i = threadIdx.x; i < chunk / 4; i += THREADS) {
    float4 v = p[i];
    double a = v.x - mean, b = v.y - mean, c = v.z - mean, d = v.w - mean;
    s += (a * a + b * b) + (c * c + d * d);
  }
  s = block_sum(s, shared);
  if (threadIdx.x == 0) partial2[blockIdx.y * CHUNKS + blockIdx.x] = s;
}

extern "C" __global__ void __launch_bounds__(THREADS) ln_norm(const float* __restrict__ x, const float* __restrict__ w,
                                                              const float* __restrict__ bias,
                                                              const double* __restrict__ partial,
                                                              const double* __restrict__ partial2,
                                                              float* __restrict__ out, int n, double eps) {
  const double mean = row_total(partial + blockIdx.y * CHUNKS) / n;
  const double rstd = 1.0 / sqrt(row_total(partial2 + blockIdx.y * CHUNKS) / n + eps);
  const int chunk = n / CHUNKS;
  const size_t base = (size_t)blockIdx.y * n + (size_t)blockIdx.x * chunk;
  const float4* p = reinterpret_cast<const float4*>(x + base);
  const float4* pw = reinterpret_cast<const float4*>(w + (size_t)blockIdx.x * chunk);
  const float4* pb = reinterpret_cast<const float4*>(bias + (size_t)blockIdx.x * chunk);
  float4* q = reinterpret_cast<float4*>(out + base);
  for (int i = threadIdx.x; i < chunk / 4; i += THREADS) {
    float4 v = p[i], g = pw[i], h = pb[i], r;
    r.x = (float)((v.x - mean) * rstd * g.x + h.x);
    r.y = (float)((v.y - mean) * rstd * g.y + h.y);
    r.z = (float)((v.z - mean) * rstd * g.z + h.z);
    r.w = (float)((v.w - mean) * rstd * g.w + h.w);
    q[i] = r;
  }
}
