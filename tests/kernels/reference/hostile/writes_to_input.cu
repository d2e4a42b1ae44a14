// expect: incorrect: input 'x' was changed by the kernel
/* @manifest
launches:
  - kernel: rowsum
    grid: [batch_size, 1, 1]
    block: [256, 1, 1]
    args: [x, out, dim]
outputs: {out: {shape: [batch_size], dtype: float32}}
requires: ["dim % 256 == 0"]
*/
// Cheat: a right answer got by using the input as scratch space. Each thread stores its partial sum
// over the row's first 256 elements and the block reduces them there, in global memory, with no
// shared memory at all. The sums are right (fp32 throughout); the input is no longer what the caller
// gave. A checker that computes the reference first and then compares only the output passes it.
// (Here the reference runs after the launch, so it would sum the clobbered rows and disagree anyway;
// the harness says what happened: it compares every input, bit for bit, with a copy taken before.)
#define THREADS 256

extern "C" __global__ void __launch_bounds__(THREADS) rowsum(float* x, float* __restrict__ out, int dim) {
  float* row = x + (size_t)blockIdx.x * dim;
  float sum = 0.f;
  for (int i = threadIdx.x; i < dim; i += THREADS) sum += row[i];
  __syncthreads();  // every thread has read its share before any is overwritten
  row[threadIdx.x] = sum;
  __syncthreads();
  for (int s = THREADS / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) row[threadIdx.x] += row[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = row[0];
}
