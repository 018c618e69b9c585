// Where does the amax of 2^26 fp16 elements lose its time? Cold-L2 event timings of the library's
// amax kernel launched as it is (behind its one-thread zeroing kernel, as a programmatic
// dependent) and of variants, at 2^26 and 2^28 elements:
//   empty       a one-block empty kernel: what a launch alone costs inside the events;
//   library     zero_words_kernel, then amax_kernel as its programmatic dependent (fp4ops.amax);
//   no zeroing  amax_kernel alone on a word zeroed before the timed region (a bound, not an op);
//   memset      cudaMemsetAsync, then amax_kernel as an ordinary launch;
//   one pass    one kernel: each block writes its max to a slot, the last block to finish
//               (a self-resetting counter) reduces the slots into the output;
//   1 wave      amax_kernel alone with one resident wave (8 blocks of 256 per SM);
//   2 loads     amax_kernel's loop with two independent 16-byte loads per thread and step;
//   L2::256B    amax_kernel's loop with ld.global.nc.L1::no_allocate.L2::256B loads.
// Build and run on the GPU, from benchmarks/probes/:
//   nvcc -std=c++20 --expt-relaxed-constexpr -O3 -arch=sm_90 amax_probe.cu -o amax_probe && ./amax_probe
// Results: docs/performance.md ("What bounds the unmet targets", the "2^26 rows" bullet).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <cstdio>
#include <cstdint>
#include <vector>

#include "../../csrc/cuda/amax_kernels.cuh"
#include "../../csrc/cuda/pdl_launch.cuh"
#include "read_probe_common.cuh"

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s\n", cudaGetErrorString(e)); return 1; } } while (0)

using fp4ops::cuda::amax_kernel;
using fp4ops::cuda::block_reduce_max;
using fp4ops::cuda::zero_words_kernel;

__global__ void empty_kernel() {}

// max |x| bits of eight fp16 in a 16-byte word (finite inputs: the probe's data is random normal).
__device__ __forceinline__ uint32_t max_bits8(uint4 w) {
  const __half2* h = reinterpret_cast<const __half2*>(&w);
  __half2 m = __hmax2(__habs2(h[0]), __habs2(h[1]));
  m = __hmax2(m, __hmax2(__habs2(h[2]), __habs2(h[3])));
  return __float_as_uint(fmaxf(__low2float(m), __high2float(m)));
}

template <int kLoads, bool kHint256>
__device__ __forceinline__ uint4 load16(const uint4* p) {
  if constexpr (kHint256) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
  } else {
    return __ldcs(p);
  }
}

// Grid-stride amax over n 16-byte words with kLoads independent loads per thread and step.
template <int kLoads, bool kHint256>
__global__ void variant_amax(const uint4* __restrict__ x, int64_t n, uint32_t* __restrict__ out_bits) {
  __shared__ uint32_t scratch[32];
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  uint32_t m = 0;
  for (; i + (kLoads - 1) * stride < n; i += kLoads * stride) {
    uint4 v[kLoads];
#pragma unroll
    for (int j = 0; j < kLoads; ++j) v[j] = load16<kLoads, kHint256>(x + i + j * stride);
#pragma unroll
    for (int j = 0; j < kLoads; ++j) m = max(m, max_bits8(v[j]));
  }
  for (; i < n; i += stride) m = max(m, max_bits8(x[i]));
  m = block_reduce_max(m, scratch);
  if (threadIdx.x == 0 && m != 0) atomicMax(out_bits, m);
}

// One pass: block maxima to slots[blockIdx.x]; the last block to arrive reduces them into *out and
// resets *arrived to 0 for the next launch on this stream.
__global__ void one_pass_amax(const uint4* __restrict__ x, int64_t n, uint32_t* __restrict__ slots,
                              unsigned* __restrict__ arrived, uint32_t* __restrict__ out_bits) {
  __shared__ uint32_t scratch[32];
  __shared__ bool last;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  uint32_t m = 0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) m = max(m, max_bits8(__ldcs(x + i)));
  m = block_reduce_max(m, scratch);
  if (threadIdx.x == 0) {
    slots[blockIdx.x] = m;
    __threadfence();
    last = atomicAdd(arrived, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  uint32_t r = 0;
  for (unsigned b = threadIdx.x; b < gridDim.x; b += blockDim.x) r = max(r, __ldcg(slots + b));
  r = block_reduce_max(r, scratch);
  if (threadIdx.x == 0) *out_bits = r, *arrived = 0;
}

// The launchers' programmatic dependent launch (csrc/cuda/pdl_launch.cuh, free of torch).
template <typename... KernelArgs, typename... Args>
void launch_pdl(void (*kernel)(KernelArgs...), unsigned grid, unsigned threads, Args... args) {
  fp4ops::cuda::launch_programmatic_dependent(kernel, grid, threads, cudaStream_t{}, args...);
}

// Median of 31 cold-L2 calls (CUDA events), each after a 256 MB read that leaves the L2 clean.
// `prepare` runs before the flush, outside the timed region.
template <typename F, typename P>
float median_us(F launch, const uint8_t* flush, size_t flush_bytes, P prepare) {
  cudaEvent_t s, e;
  cudaEventCreate(&s), cudaEventCreate(&e);
  std::vector<float> t;
  for (int r = 0; r < 34; ++r) {
    prepare();
    plain_read<<<g_sms * 4, 512>>>(reinterpret_cast<const uint4*>(flush), flush_bytes / 16, g_sink);
    cudaEventRecord(s), launch(), cudaEventRecord(e), cudaEventSynchronize(e);
    float ms;
    cudaEventElapsedTime(&ms, s, e);
    if (r >= 3) t.push_back(ms * 1e3f);
  }
  cudaEventDestroy(s), cudaEventDestroy(e);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int main() {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  g_sms = prop.multiProcessorCount;
  const size_t flush_bytes = size_t(256) << 20, max_numel = size_t(1) << 28;
  uint8_t* flush;
  __half* x;
  uint32_t *out, *slots;
  unsigned* arrived;
  CK(cudaMalloc(&flush, flush_bytes));
  CK(cudaMalloc(&x, max_numel * 2));
  CK(cudaMalloc(&g_sink, 4));
  CK(cudaMalloc(&out, 4));
  CK(cudaMalloc(&slots, 4 * 65536));
  CK(cudaMalloc(&arrived, 4));
  CK(cudaMemset(arrived, 0, 4));
  CK(cudaMemset(flush, 1, flush_bytes));
  std::vector<__half> host(max_numel);
  uint32_t seed = 12345;
  float true_max = 0;
  for (size_t i = 0; i < max_numel; ++i) {
    seed = seed * 1664525u + 1013904223u;
    const float v = (static_cast<int>(seed >> 9) - (1 << 22)) / float(1 << 20);  // [-4, 4)
    host[i] = __float2half(v);
  }
  CK(cudaMemcpy(x, host.data(), max_numel * 2, cudaMemcpyHostToDevice));
  printf("%s, %d SMs; cold L2, median of 31 calls, us (GB/s of the fp16 input)\n", prop.name, g_sms);
  for (int log2n : {26, 28}) {
    const int64_t numel = int64_t(1) << log2n, words = numel / 8;
    for (size_t i = 0; i < size_t(numel); ++i) true_max = std::max(true_max, std::abs(__half2float(host[i])));
    const uint4* xw = reinterpret_cast<const uint4*>(x);
    const unsigned grid16 = g_sms * 16, grid8 = g_sms * 8;
    struct Case {
      const char* name;
      std::function<void()> launch;
      bool zero_first;  // the output word zeroed before the timed region (the op's zeroing left out)
    };
    const Case cases[] = {
        {"empty", [&] { empty_kernel<<<1, 32>>>(); }, false},
        {"library", [&] { zero_words_kernel<<<1, 1>>>(out, 1); launch_pdl(amax_kernel<__half, true>, grid16, 256, (const __half*)x, numel, out); }, false},
        {"no zeroing", [&] { amax_kernel<__half, true><<<grid16, 256>>>(x, numel, out); }, true},
        {"memset", [&] { cudaMemsetAsync(out, 0, 4); amax_kernel<__half, true><<<grid16, 256>>>(x, numel, out); }, false},
        {"one pass", [&] { one_pass_amax<<<grid16, 256>>>(xw, words, slots, arrived, out); }, false},
        {"1 wave", [&] { amax_kernel<__half, true><<<grid8, 256>>>(x, numel, out); }, true},
        {"1 load (probe loop)", [&] { variant_amax<1, false><<<grid16, 256>>>(xw, words, out); }, true},
        {"2 loads", [&] { variant_amax<2, false><<<grid16, 256>>>(xw, words, out); }, true},
        {"2 loads, 1 wave", [&] { variant_amax<2, false><<<grid8, 256>>>(xw, words, out); }, true},
        {"L2::256B", [&] { variant_amax<1, true><<<grid16, 256>>>(xw, words, out); }, true},
    };
    for (const Case& c : cases) {
      const float us = median_us(c.launch, flush, flush_bytes, [&] { if (c.zero_first) cudaMemsetAsync(out, 0, 4); });
      float got = 0;
      CK(cudaMemcpy(&got, out, 4, cudaMemcpyDeviceToHost));
      const bool checked = c.name[0] != 'e';
      printf("2^%d %-22s %8.2f us %7.0f GB/s %s\n", log2n, c.name, us, numel * 2 / us / 1e3,
             !checked ? "" : (got == true_max ? "ok" : "WRONG"));
    }
    const float read_us = median_us([&] { plain_read<<<g_sms * 4, 512>>>(xw, words, g_sink); }, flush, flush_bytes, [] {});
    printf("2^%d %-22s %8.2f us %7.0f GB/s\n", log2n, "plain read (4 loads)", read_us, numel * 2 / read_us / 1e3);
  }
  return 0;
}
