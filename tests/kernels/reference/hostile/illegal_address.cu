// expect: crashed: illegal memory access|ILLEGAL_ADDRESS
/* @manifest
launches:
  - kernel: rowsum
    grid: [batch_size, 1, 1]
    block: [256, 1, 1]
    args: [x, out, dim]
outputs: {out: {shape: [batch_size], dtype: float32}}
requires: ["dim % 4 == 0"]
*/
// A fault: the sum is right, but the store's index is built with the input's element stride shifted
// by the row size in bytes (a 64-bit offset of 2^48 bytes from the second row on), far beyond any
// allocation and above the 48-bit addresses the host can map: an illegal address on the GPU. The
// evaluation child reports the fault as `crashed`; the next evaluation runs in a fresh process.
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
  const size_t stride = (size_t)dim * sizeof(float) << 34;  // 2^48 bytes between rows for dim = 4096
  if (threadIdx.x == 0) *(float*)((char*)out + blockIdx.x * stride + blockIdx.x * sizeof(float)) = partial[0];
}
