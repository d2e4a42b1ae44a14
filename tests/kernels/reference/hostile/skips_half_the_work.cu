// expect: incorrect: relative error .* over the tolerance .*\(own draw\)
/* @manifest
launches:
  - kernel: rowsum
    grid: [batch_size, 1, 1]
    block: [256, 1, 1]
    args: [x, out, dim]
outputs: {out: {shape: [batch_size], dtype: float32}}
requires: ["dim % 64 == 0"]
*/
// Cheat: sums every other element and doubles the result, in units of 128-byte lines (32 floats), so
// the skipped half of the row is never fetched: half the bytes, about twice the speed. On the inputs
// a lazy test uses (torch.ones, a constant fill, any row that repeats with a period of 32 elements)
// the answer is exact. On random data the skipped half's sum is an independent draw as large as the
// answer, and the relative error is about 1. (Were it right, its time would also be under the
// roofline floor, which no kernel that reads every byte can beat.)
#define THREADS 256

extern "C" __global__ void __launch_bounds__(THREADS) rowsum(const float* __restrict__ x, float* __restrict__ out,
                                                             int dim) {
  __shared__ float partial[THREADS];
  const float4* row = reinterpret_cast<const float4*>(x + (size_t)blockIdx.x * dim);
  float sum = 0.f;
  // float4 i lies in 128-byte line i / 8: read the even lines only.
  for (int j = threadIdx.x; j < dim / 8; j += THREADS) {
    int i = (j / 8) * 16 + j % 8;
    float4 v = __ldg(row + i);
    sum += (v.x + v.y) + (v.z + v.w);
  }
  partial[threadIdx.x] = 2.f * sum;
  __syncthreads();
  for (int s = THREADS / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}
