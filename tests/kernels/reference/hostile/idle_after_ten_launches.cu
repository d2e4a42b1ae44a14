// expect: incorrect: relative error .* over the tolerance .*\(own draw\)
/* @manifest
launches:
  - kernel: rowsum
    grid: [batch_size, 1, 1]
    block: [256, 1, 1]
    args: [x, out, dim]
outputs: {out: {shape: [batch_size], dtype: float32}}
requires: ["dim % 4 == 0", "batch_size <= 65536"]
*/
// Cheat: honest for its first ten launches, then idle. Checkers tend to check a few launches and then
// time many (KernelBench: five correctness trials, then a hundred timed runs, never compared), so
// after the tenth launch it only writes back the sums it computed last: a copy of 8 KiB, plausible
// values, and a time far under what reading the input takes. It counts launches in a __device__
// counter that the last block of each launch advances, so every block of a launch agrees. The harness
// checks every launch, the timed ones included, each on fresh content: the 11th (a timed launch on
// the problem's own distribution) returns the 10th's sums.
#define THREADS 256
#define HONEST_LAUNCHES 10

__device__ unsigned launches = 0;
__device__ unsigned blocks_done = 0;
__device__ float last_sums[65536];

extern "C" __global__ void __launch_bounds__(THREADS) rowsum(const float* __restrict__ x, float* __restrict__ out,
                                                             int dim) {
  __shared__ float partial[THREADS];
  const unsigned launch = *(volatile unsigned*)&launches;  // advanced only once every block has read it
  if (launch >= HONEST_LAUNCHES) {
    if (threadIdx.x == 0) out[blockIdx.x] = last_sums[blockIdx.x];
  } else {
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
    if (threadIdx.x == 0) out[blockIdx.x] = last_sums[blockIdx.x] = partial[0];
  }
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(&blocks_done, 1) == gridDim.x - 1) {  // the last block of this launch
      blocks_done = 0;
      atomicAdd(&launches, 1);
    }
  }
}
