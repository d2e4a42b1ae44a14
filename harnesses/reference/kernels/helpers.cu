// The reference harness's own kernel. smem_poison: one block per SM, each taking the most shared memory
// a block may have, writes all of it with 0xFF bytes (a NaN in every floating type) before a candidate's
// launch. Shared memory is not cleared between kernels, so a kernel that reads shared memory it never
// wrote computes from NaN, and the gate sees it.
extern "C" __global__ void smem_poison(unsigned words) {
  extern __shared__ unsigned smem[];
  volatile unsigned* s = smem;
  for (unsigned i = threadIdx.x; i < words; i += blockDim.x) s[i] = 0xFFFFFFFFu;
  __syncthreads();
}
