// expect: rejected: grid
/* @manifest
launches:
  - kernel: zero
    grid: ["cdiv(batch_size, 256)", 1, 1]
    block: [256, 1, 1]
    args: [out, batch_size]
  - kernel: rowsum
    grid: [1, "batch_size * (dim // 128)", 1]
    block: [32, 1, 1]
    args: [x, out, dim]
outputs: {out: {shape: [batch_size], dtype: float32}}
requires: ["dim % 128 == 0"]
*/
// A launch the device cannot make: a split-row sum, one warp for each 128-element chunk of a row,
// its sum added atomically into the row's output (zeroed by a first kernel). The flat chunk index
// is put in the grid's y dimension, which holds at most 65535 blocks (x holds 2^31 - 1): 2048 rows
// of 32 chunks are 65536 blocks, one too many, and cuLaunchKernel fails with an invalid value.
#define CHUNK 128

extern "C" __global__ void zero(float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 0.f;
}

extern "C" __global__ void rowsum(const float* __restrict__ x, float* __restrict__ out, int dim) {
  const size_t chunk = blockIdx.y;
  const int row = (int)(chunk * CHUNK / dim);
  float4 v = __ldg(reinterpret_cast<const float4*>(x + chunk * CHUNK) + threadIdx.x);
  float s = (v.x + v.y) + (v.z + v.w);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
  if (threadIdx.x == 0) atomicAdd(out + row, s);
}
