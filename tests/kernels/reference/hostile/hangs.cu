// expect: timeout: killed after
/* @manifest
launches:
  - kernel: rowsum
    grid: [batch_size, 1, 1]
    block: [1024, 1, 1]
    args: [x, out, dim]
outputs: {out: {shape: [batch_size], dtype: float32}}
requires: ["dim % 4 == 0"]
*/
// A hang: every block sums its row, then waits at a software grid barrier (a counter every block
// bumps, then spins on) so that block 0 can write all the sums in one coalesced store. That needs
// every block resident at once; with 2048 blocks of 1024 threads, two fit on an SM, so the first
// few hundred spin forever waiting for blocks that can never start. The harness kills the
// evaluation after its timeout and says so.
#define THREADS 1024

__device__ unsigned arrived = 0;
__device__ float sums[65536];

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
  if (threadIdx.x == 0) {
    sums[blockIdx.x] = partial[0];
    __threadfence();
    atomicAdd(&arrived, 1);
    while (*(volatile unsigned*)&arrived < gridDim.x) __nanosleep(1000);
  }
  __syncthreads();
  if (blockIdx.x == 0)
    for (int i = threadIdx.x; i < gridDim.x; i += THREADS) out[i] = sums[i];
}
