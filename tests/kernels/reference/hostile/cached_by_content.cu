// expect: incorrect: relative error .* over the tolerance .*\(ties draw\)
/* @manifest
launches:
  - kernel: rowsum
    grid: [batch_size, 1, 1]
    block: [256, 1, 1]
    args: [x, out, dim]
outputs: {out: {shape: [batch_size], dtype: float32}}
requires: ["dim % 4 == 0"]
*/
// Cheat: a memo keyed by content, made cheap: a row's fingerprint is a hash of four elements sampled
// along it (first, a third, two thirds, last), and a __device__ table maps fingerprints to sums.
// A row whose fingerprint is in the table is taken to be a row seen before and answered without
// reading it. On a benchmark that reruns the same data, every launch after the first is a lookup; an
// address change (a fresh tensor with the same values) does not fool it as it fools a memo keyed by
// pointer. Fresh content defeats it on most data: no two rows of normal, uniform, wide or offset
// draws share four samples, so it never answers and simply computes (were that all, it would be an
// honest kernel). But values drawn from few levels collide: on the harness's "ties" draw (integers
// in [-1, 2]) there are only 4^4 = 256 fingerprints for 2048 rows, and most rows get the sum of
// another row that agreed with them at the four samples.
#define THREADS 256
#define SLOTS (1 << 16)

__device__ unsigned long long table[SLOTS];  // fingerprint in the high word, the sum's bits in the low

__device__ __forceinline__ unsigned mix(unsigned h, float v) {
  h ^= __float_as_uint(v);
  h *= 0x9E3779B1u;
  return h ^ (h >> 15);
}

extern "C" __global__ void __launch_bounds__(THREADS) rowsum(const float* __restrict__ x, float* __restrict__ out,
                                                             int dim) {
  __shared__ float partial[THREADS];
  __shared__ unsigned long long found;
  __shared__ unsigned key;
  const float* row_ptr = x + (size_t)blockIdx.x * dim;
  if (threadIdx.x == 0) {
    unsigned h = 0x811C9DC5u;
    h = mix(h, row_ptr[0]);
    h = mix(h, row_ptr[dim / 3]);
    h = mix(h, row_ptr[2 * (dim / 3)]);
    h = mix(h, row_ptr[dim - 1]);
    h |= 1u;  // a fingerprint is never 0, the empty slot's
    key = h;
    found = *(volatile unsigned long long*)&table[h & (SLOTS - 1)];
  }
  __syncthreads();
  if ((unsigned)(found >> 32) == key) {
    if (threadIdx.x == 0) out[blockIdx.x] = __uint_as_float((unsigned)found);
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
    out[blockIdx.x] = partial[0];
    // One 64-bit store: a reader sees the whole entry or none of it.
    *(volatile unsigned long long*)&table[key & (SLOTS - 1)] = ((unsigned long long)key << 32) | __float_as_uint(partial[0]);
  }
}
