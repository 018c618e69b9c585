// Can bulk (TMA) copies read the GEMV's bytes faster than its per-lane cp.async ring? Read-only
// probes, no arithmetic, cold L2, over the GEMV shapes as rows of K / 2 bytes:
//   plain  16-byte loads, 4 in flight per thread, grid-stride (the read ceiling, as in
//          gemv_read_probe.cu);
//   bulk   persistent CTAs, each taking a contiguous run of (8-row tile, chunk) units; per unit one
//          producer lane per row issues a `cp.async.bulk` of `chunk` bytes into a stage, the stage's
//          mbarrier counts the bytes in, the consumer warps each read their share of the stage and
//          release it through a second mbarrier. Stages x chunk sizes x CTAs per SM are swept.
// Build and run on the GPU, from benchmarks/probes/:
//   nvcc -std=c++20 -O3 -arch=sm_90 gemv_bulk_probe.cu -o bulk_probe && ./bulk_probe
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "read_probe_common.cuh"

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n\t.reg .pred done;\n\t"
      "WAIT_%=:\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n\t"
      "@!done bra WAIT_%=;\n\t}" :: "r"(bar), "r"(parity) : "memory");
}
template <bool kEvictFirst>
__device__ __forceinline__ void bulk_copy(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  if constexpr (kEvictFirst) {
    asm volatile(
        "{\n\t.reg .b64 policy;\n\t"
        "createpolicy.fractional.L2::evict_first.b64 policy, 1.0;\n\t"
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], policy;\n\t}"
        :: "r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
  } else {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
  }
}

constexpr int kTileRows = 8, kConsumerWarps = 8, kPad = 64;

// Warp 0 produces (lanes 0..7, one row each); warps 1..8 consume. Stage s = 8 rows of `chunk` +
// kPad bytes; full[s] completes when the stage's bytes have landed, empty[s] when all consumer warps
// have read it.
template <bool kEvictFirst>
__global__ void __launch_bounds__((kConsumerWarps + 1) * 32) bulk_read(const uint8_t* a, int64_t rows, int64_t row_bytes,
                                                                      int chunk, int stages, unsigned* sink) {
  extern __shared__ __align__(128) uint8_t smem[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int stage_bytes = kTileRows * (chunk + kPad);
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + static_cast<size_t>(stages) * stage_bytes);
  const uint32_t full0 = smem_addr(bars), empty0 = smem_addr(bars + stages), ring = smem_addr(smem);
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) mbar_init(full0 + 8 * s, 1), mbar_init(empty0 + 8 * s, kConsumerWarps);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  const int64_t chunks = (row_bytes + chunk - 1) / chunk, units = rows / kTileRows * chunks;
  const int64_t begin = units * blockIdx.x / gridDim.x, end = units * (blockIdx.x + 1) / gridDim.x;
  if (warp == 0) {
    for (int64_t u = begin; u < end; ++u) {
      const int i = static_cast<int>(u - begin), s = i % stages;
      if (i >= stages) mbar_wait(empty0 + 8 * s, (i / stages - 1) & 1);
      const int64_t tile = u / chunks, c = u % chunks;
      const uint32_t bytes = static_cast<uint32_t>(row_bytes - c * chunk < chunk ? row_bytes - c * chunk : chunk);
      if (lane == 0) mbar_expect_tx(full0 + 8 * s, bytes * kTileRows);
      __syncwarp();
      if (lane < kTileRows) {
        bulk_copy<kEvictFirst>(ring + s * stage_bytes + lane * (chunk + kPad), a + (tile * kTileRows + lane) * row_bytes + c * chunk,
                               bytes, full0 + 8 * s);
      }
    }
  } else {
    unsigned acc = 0;
    const int cw = warp - 1;
    for (int64_t u = begin; u < end; ++u) {
      const int i = static_cast<int>(u - begin), s = i % stages;
      mbar_wait(full0 + 8 * s, (i / stages) & 1);
      // Warp cw reads 16 B per lane of rows 0..7 at column 128 cw + 16 (lane % 8)... as the GEMV would.
      const uint8_t* st = smem + s * stage_bytes + (lane / 4) * (chunk + kPad) + (cw * 128) % chunk + 16 * (lane % 4);
      acc += *reinterpret_cast<const unsigned*>(st) ^ *reinterpret_cast<const unsigned*>(st + 64);
      __syncwarp();
      if (lane == 0) mbar_arrive(empty0 + 8 * s);
    }
    if (acc == 0x12345678u) *sink = acc;
  }
}

int main() {
  cudaDeviceGetAttribute(&g_sms, cudaDevAttrMultiProcessorCount, 0);
  const size_t max_bytes = 16384ull * 8192, flush_bytes = 256ull << 20, copy_bytes = 512ull << 20;
  uint8_t *a, *flush, *c0, *c1;
  CK(cudaMalloc(&a, max_bytes));
  CK(cudaMalloc(&flush, flush_bytes));
  CK(cudaMalloc(&g_sink, 4));
  CK(cudaMalloc(&c0, copy_bytes));
  CK(cudaMalloc(&c1, copy_bytes));
  CK(cudaMemset(a, 1, max_bytes));
  CK(cudaMemset(flush, 0, flush_bytes));
  CK(cudaMemset(c0, 0, copy_bytes));
  const float copy_ms = time_ms([&] { cudaMemcpyAsync(c1, c0, copy_bytes, cudaMemcpyDeviceToDevice); }, flush, flush_bytes);
  const double copy_gbs = 2.0 * copy_bytes / copy_ms / 1e6;
  printf("copy ceiling (512 MB, read + write): %.0f GB/s\n\n", copy_gbs);
  struct Shape { int64_t rows, row_bytes; } shapes[] = {{16384, 8192}, {4096 * 8, 3584}, {7168 * 4, 1024}, {7168, 8192}};
  printf("| rows x bytes | plain | bulk: chunk, stages, CTAs/SM, evict_first -> %% of copy ... |\n|---|---|---|\n");
  for (const Shape sh : shapes) {
    const size_t bytes = sh.rows * sh.row_bytes;
    const auto pct = [&](float ms) { return 100.0 * bytes / ms / 1e6 / copy_gbs; };
    printf("| %6lld x %5lld B | %5.1f%% |", static_cast<long long>(sh.rows), static_cast<long long>(sh.row_bytes),
           pct(time_ms([&] { plain_read<<<g_sms * 4, 512>>>(reinterpret_cast<const uint4*>(a), bytes / 16, g_sink); }, flush, flush_bytes)));
    struct Config { int chunk, stages, per_sm; bool evict_first; } configs[] = {
        {1024, 12, 1, false}, {1024, 24, 1, false}, {1024, 12, 2, false}, {512, 24, 1, false}, {512, 12, 2, false},
        {2048, 12, 1, false}, {1024, 24, 1, true}, {1024, 6, 2, false}};
    for (const Config cf : configs) {
      const size_t smem = static_cast<size_t>(cf.stages) * kTileRows * (cf.chunk + kPad) + 16 * cf.stages;
      const auto kernel = cf.evict_first ? bulk_read<true> : bulk_read<false>;
      CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
      int resident = 0;
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, (kConsumerWarps + 1) * 32, smem);
      const int per_sm = resident < cf.per_sm ? resident : cf.per_sm;
      const float ms = time_ms([&] {
        kernel<<<per_sm * g_sms, (kConsumerWarps + 1) * 32, smem>>>(a, sh.rows, sh.row_bytes, cf.chunk, cf.stages, g_sink);
      }, flush, flush_bytes);
      printf(" %d,%d,%d%s: %5.1f%% |", cf.chunk, cf.stages, per_sm, cf.evict_first ? ",ef" : "", pct(ms));
    }
    printf("\n");
  }
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  return 0;
}
