// Which half of L2 is near each SM (docs/probes/, README: "Where the blocks land").
// Build and run on the GPU: nvcc -O2 -arch=sm_90a -o l2_sides l2_sides.cu && ./l2_sides
// Every SM (one block each, held alone by its shared memory) times L2 hits (ld.global.cg, L1 bypassed) to
// 96 addresses about 1 MB apart; per address the SMs split into a fast and a slow group, and an SM's side
// is whether it agrees with SM 0 on most addresses. Prints the spread (10th, 90th percentile) of the first
// addresses' latencies and, per SM: its side, how many addresses it agrees with SM 0 on, its mean latency
// in cycles.
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); exit(1); } } while (0)
constexpr int NADDR = 96, REPS = 24;
__global__ void probe(const unsigned* buf, size_t stride_words, unsigned* lat, int* sm_of_block) {
  extern __shared__ unsigned pad[];
  unsigned smid; asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
  if (threadIdx.x != 0) return;
  sm_of_block[blockIdx.x] = smid;
  for (int i = 0; i < NADDR; ++i) {
    const unsigned* p = buf + (size_t)i * stride_words;
    unsigned v;
    asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");  // bring into L2
    p += v;  // v is 0: a dependence
    long long t0 = clock64();
    for (int r = 0; r < REPS; ++r) {
      asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
      p += v;
    }
    long long t1 = clock64();
    lat[smid * NADDR + i] = (unsigned)((t1 - t0) / REPS) + (v & 1);
  }
  pad[0] = 0;
}
int main() {
  int sms; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const size_t stride_words = (1u << 20) / 4 + 32 * 7;  // ~1 MB apart, not a power of two
  unsigned *buf, *lat; int* smb;
  CK(cudaMalloc(&buf, NADDR * stride_words * 4 + 4096)); CK(cudaMemset(buf, 0, NADDR * stride_words * 4 + 4096));
  CK(cudaMalloc(&lat, 256 * NADDR * 4)); CK(cudaMemset(lat, 0, 256 * NADDR * 4));
  CK(cudaMalloc(&smb, sms * 4));
  CK(cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
  for (int it = 0; it < 3; ++it) probe<<<sms, 32, 200 * 1024>>>(buf, stride_words, lat, smb);
  CK(cudaDeviceSynchronize());
  std::vector<unsigned> L(256 * NADDR); CK(cudaMemcpy(L.data(), lat, L.size() * 4, cudaMemcpyDeviceToHost));
  // Per address, the median over SMs splits near from far; an SM's signature is which side it is on.
  std::vector<int> near_count(sms, 0);
  std::vector<std::vector<int>> sig(sms, std::vector<int>(NADDR));
  for (int i = 0; i < NADDR; ++i) {
    std::vector<unsigned> col; for (int s = 0; s < sms; ++s) col.push_back(L[s * NADDR + i]);
    std::vector<unsigned> srt = col; std::sort(srt.begin(), srt.end());
    unsigned lo = srt[sms / 10], hi = srt[sms * 9 / 10], mid = (lo + hi) / 2;
    for (int s = 0; s < sms; ++s) sig[s][i] = col[s] < mid;
    if (i < 6) printf("addr %d: p10 %u p90 %u\n", i, lo, hi);
  }
  // Group SMs by agreement with SM 0's signature.
  printf("sm group agree_with_sm0 mean_latency\n");
  for (int s = 0; s < sms; ++s) {
    int agree = 0; double mean = 0;
    for (int i = 0; i < NADDR; ++i) { agree += sig[s][i] == sig[0][i]; mean += L[s * NADDR + i]; }
    printf("%d %d %d %.1f\n", s, agree > NADDR / 2 ? 0 : 1, agree, mean / NADDR);
  }
  return 0;
}
