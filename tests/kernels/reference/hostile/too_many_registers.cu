// expect: rejected: a block of 1024 threads, but with \d+ registers a thread it can run at most \d+
/* @manifest
launches:
  - kernel: rowsum
    grid: ["batch_size // 16", 1, 1]
    block: [1024, 1, 1]
    args: [x, out, dim]
outputs: {out: {shape: [batch_size], dtype: float32}}
requires: ["dim == 4096", "batch_size % 16 == 0"]
*/
// A launch the device cannot make: an overflow-safe sum that reads its data once and keeps it in
// registers for two passes. Sixteen rows a block of 1024 threads, one float4 of each row a thread:
// the first pass finds each row's largest magnitude (a block-wide max), the second sums the row
// scaled by a power of two that keeps partial sums far from overflow (exact, so the answer is the
// plain sum). The 64 floats a thread holds across the barrier between the passes, with no
// __launch_bounds__ to hold ptxas back, make more than 64 registers a thread: 1024 threads would need
// more than the 65536 registers an SM has, and the launch would fail with "too many resources
// requested". The harness reads the kernel's registers from the cubin and refuses it before the
// first launch.
#define THREADS 1024
#define ROWS 16

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

extern "C" __global__ void rowsum(const float* __restrict__ x, float* __restrict__ out, int dim) {
  __shared__ float partial[ROWS][THREADS / 32];
  __shared__ float scale[ROWS];
  const int first = blockIdx.x * ROWS, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float4 v[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r)
    v[r] = __ldcs(reinterpret_cast<const float4*>(x + (size_t)(first + r) * dim) + threadIdx.x);
  // Pass 1: each row's largest magnitude.
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    float m = warp_max(fmaxf(fmaxf(fabsf(v[r].x), fabsf(v[r].y)), fmaxf(fabsf(v[r].z), fabsf(v[r].w))));
    if (lane == 0) partial[r][warp] = m;
  }
  __syncthreads();
  if (warp < ROWS) {
    float m = warp_max(partial[warp][lane]);
    if (lane == 0) scale[warp] = m > 0.f ? exp2f((float)-ilogbf(m)) : 1.f;
  }
  __syncthreads();
  // Pass 2: the scaled sum, from the same registers.
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const float k = scale[r];
    float s = warp_sum((v[r].x * k + v[r].y * k) + (v[r].z * k + v[r].w * k));
    if (lane == 0) partial[r][warp] = s;
  }
  __syncthreads();
  if (warp < ROWS) {
    float s = warp_sum(partial[warp][lane]);
    if (lane == 0) out[first + warp] = s / scale[warp];
  }
}
