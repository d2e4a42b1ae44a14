// expect: incorrect|crashed: input 'x' was changed by the kernel|illegal memory access|ILLEGAL_ADDRESS
/* @manifest
launches:
  - kernel: rowsum
    grid: [batch_size, 1, 1]
    block: [256, 1, 1]
    args: [x, out, dim]
outputs: {out: {shape: [batch_size], dtype: float32}}
requires: ["dim % 64 == 0"]
*/
// Cheat: chooses its own input. It looks for the copy the input is checked against at the place an
// earlier gate kept it in GPU memory (now the inputs are drawn again after the launch, from a state kept
// on the host: there is no copy to find, and the write lands in other memory or faults).
// Before that fix: So the kernel
// finds the copy, writes zeros into the input and into the copy alike, and writes zeros as the
// answer: the input "is unchanged", the reference, run afterwards on the zeroed input, returns zeros,
// and every launch passes, computing nothing. (For the row sum that saves no time, since zeroing costs
// as much as reading; for a reference that computes far more than it reads, a matrix product say, it
// is a large fake speed-up, capped only by the roofline floor.)
// Finding the copy: each block compares the first 64 elements of its row, bit for bit, with the same
// place in the two spots PyTorch's caching allocator puts a 32 MiB clone in the evaluation child, as
// seen on an H100 (50 MB of L2) with PyTorch 2.11: the 64 MiB segment just below the input (freed by
// the input's statistics), and, once the "wide" draw has made room, the segment just after the L2
// flush buffer (the input's 32 MiB, a 10 MiB gap, the 100 MiB buffer). Elsewhere the offsets may
// differ and the read may fault. Where the harness keeps the copy out of the kernel's reach, it finds
// no copy and the zeroed input gives it away.
#define THREADS 256

__device__ bool same(const float* a, const float* b) {
  for (int i = 0; i < 64; ++i)
    if (__float_as_uint(a[i]) != __float_as_uint(b[i])) return false;
  return true;
}

extern "C" __global__ void __launch_bounds__(THREADS) rowsum(float* x, float* __restrict__ out, int dim) {
  __shared__ float* copy;
  float* row = x + (size_t)blockIdx.x * dim;
  if (threadIdx.x == 0) {
    float* below = row - (64 << 20) / sizeof(float);   // the copy's row, if the copy is below the input
    float* above = row + (142 << 20) / sizeof(float);  // the copy's row, if it follows the flush buffer
    copy = same(below, row) ? below : same(above, row) ? above : nullptr;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < dim; i += THREADS) {
    row[i] = 0.f;
    if (copy) copy[i] = 0.f;
  }
  if (threadIdx.x == 0) out[blockIdx.x] = 0.f;
}
