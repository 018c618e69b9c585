// How fast can the GEMV's bytes merely be read? Read-only probes, no arithmetic, cold L2:
//   plain        16-byte loads, 4 in flight per thread, grid-stride (a read-bandwidth ceiling);
//   contiguous   the GEMV's machinery (a 4-stage cp.async ring per warp, 1 KB per stage, 16-warp
//                CTAs, 2 per SM) over contiguous memory;
//   gemv pattern the same ring reading what the GEMV reads: groups of warps_k warps own contiguous
//                16-row tiles, warp kw copies segments kw, kw + warps_k, ... as 16 B of rows g and
//                g + 8 per lane (csrc/cuda/gemv_mma.cuh), scales left out;
//   rows         the same group turns, but each warp copies its kilobyte as two contiguous
//                512-byte runs of one or two rows.
// Build and run on the GPU, from benchmarks/probes/:
//   nvcc -std=c++20 --expt-relaxed-constexpr -O3 -arch=sm_90 gemv_read_probe.cu -o probe && ./probe
// Results and what they bound: docs/performance.md ("The read floor at the GEMV's sizes").
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>

#include "../../csrc/cuda/gemv_mma.cuh"  // the GEMV's own cp.async helpers and tile schedule
#include "read_probe_common.cuh"

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s\n", cudaGetErrorString(e)); return 1; } } while (0)

using fp4ops::cuda::MmaSchedule;
__device__ __forceinline__ void cp16(uint32_t dst, const void* src) { fp4ops::cuda::cp_async_16_streaming(dst, src); }
// The same copy with another L2 prefetch hint: 0 none, 256 the 256-byte prefetch (128 is cp16's).
template <int kPrefetch>
__device__ __forceinline__ void cp16_hint(uint32_t dst, const void* src) {
  if constexpr (kPrefetch == 256) {
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;" :: "r"(dst), "l"(src));
  } else if constexpr (kPrefetch == 0) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(dst), "l"(src));
  } else {
    cp16(dst, src);
  }
}
__device__ __forceinline__ void commit() { fp4ops::cuda::cp_async_commit(); }
template <int N> __device__ __forceinline__ void waitg() { fp4ops::cuda::cp_async_wait<N>(); }

// This CTA's group `group` (of `groups`): its tiles [begin, end), shared out as the GEMV does
// (MmaSchedule: an even share per CTA, split evenly among its groups).
__device__ __forceinline__ int2 share_of(int64_t tiles, int groups, int group, int wk) {
  const MmaSchedule schedule{wk, tiles / gridDim.x, tiles % gridDim.x};
  int64_t begin, end;
  schedule.group_tiles(blockIdx.x, group, groups, &begin, &end);
  return make_int2(static_cast<int>(begin), static_cast<int>(end));
}

// A warp's ring of kStages 1-KB stages over `units` steps: `issue` copies the next step (one
// commit group each); each landed stage is read once, so the copies cannot be elided.
template <int kStages, typename Issue>
__device__ __forceinline__ unsigned stream_ring(int units, const uint8_t* ring, int lane, Issue&& issue) {
  unsigned acc = 0;
  for (int i = 0; i < kStages - 1; ++i) issue();
  for (int u = 0; u < units; ++u) {
    waitg<kStages - 2>(); __syncwarp();
    issue();
    acc += *(const unsigned*)(ring + (u % kStages) * 1024 + lane * 16);
  }
  return acc;
}

// Contiguous: each warp streams 512-B pieces, grid-stride, same ring depth.
template <int kStages>
__global__ void __launch_bounds__(512, 2) contiguous(const uint8_t* a, size_t bytes, unsigned* sink) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  uint8_t* ring = smem + warp * kStages * 1024;
  const size_t warps_total = (size_t)gridDim.x * (blockDim.x / 32);
  const size_t wid = (size_t)blockIdx.x * (blockDim.x / 32) + warp;
  const size_t units = bytes / 1024;
  unsigned acc = 0;
  size_t issued = wid;
  auto issue = [&]() {
    if (issued < units) {
      const uint8_t* src = a + issued * 1024 + lane * 16;
      uint32_t dst = (uint32_t)__cvta_generic_to_shared(ring + ((issued / warps_total) % kStages) * 1024 + lane * 16);
      cp16(dst, src); cp16(dst + 512, src + 512);
    }
    commit(); issued += warps_total;
  };
  for (int i = 0; i < kStages - 1; ++i) issue();
  for (size_t u = wid; u < units; u += warps_total) {
    waitg<kStages - 2>(); __syncwarp();
    issue();
    acc += *(const unsigned*)(ring + ((u / warps_total) % kStages) * 1024 + lane * 16);
  }
  if (acc == 0x12345678u) *sink = acc;
}

// GEMV pattern: groups of wk warps own contiguous 16-row tiles; warp kw reads segments kw, kw+wk, ...;
// lane (g, t) copies 16 B of rows g and g+8 at byte 16t of the segment's 64 B.
template <int kStages, int kPrefetch = 128>
__global__ void __launch_bounds__(512, 2) gemv_pattern(const uint8_t* a, int64_t rows, int64_t row_bytes, int wk, unsigned* sink) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  uint8_t* ring = smem + warp * kStages * 1024;
  const int groups = (blockDim.x / 32) / wk, group = warp / wk, kw = warp % wk;
  const int64_t tiles = rows / 16;
  const int2 share = share_of(tiles, groups, group, wk);
  const int64_t begin = share.x, end = share.y;
  const int segs = (int)(row_bytes / 64), count = (segs - kw + wk - 1) / wk;
  const int units = (int)(end - begin) * count;
  int issued = 0;
  auto issue = [&]() {
    if (issued < units) {
      const int64_t tile = begin + issued / count; const int seg = kw + (issued % count) * wk;
      const uint8_t* src = a + (tile * 16 + g) * row_bytes + seg * 64 + 16 * t;
      uint32_t dst = (uint32_t)__cvta_generic_to_shared(ring + (issued % kStages) * 1024 + g * 64 + 16 * t);
      cp16_hint<kPrefetch>(dst, src); cp16_hint<kPrefetch>(dst + 512, src + 8 * row_bytes);
    }
    commit(); ++issued;
  };
  const unsigned acc = stream_ring<kStages>(units, ring, lane, issue);
  if (acc == 0x12345678u) *sink = acc;
}

// The same group turns, but each warp copies 1 KB of the group's turn as two contiguous 512-B runs
// (the turn is 16 rows x wk * 64 B, row-major): one row (or two) per instruction.
template <int kStages>
__global__ void __launch_bounds__(512, 2) gemv_rows(const uint8_t* a, int64_t rows, int64_t row_bytes, int wk, unsigned* sink) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  uint8_t* ring = smem + warp * kStages * 1024;
  const int groups = (blockDim.x / 32) / wk, group = warp / wk, kw = warp % wk;
  const int64_t tiles = rows / 16;
  const int2 share = share_of(tiles, groups, group, wk);
  const int64_t begin = share.x, end = share.y;
  const int segs = (int)(row_bytes / 64), turns = segs / wk;  // assumes wk divides segs
  const int units = (int)(end - begin) * turns;
  const int turn_row_bytes = wk * 64;
  int issued = 0;
  auto issue = [&]() {
    if (issued < units) {
      const int64_t tile = begin + issued / turns; const int turn = issued % turns;
      for (int i = 0; i < 2; ++i) {
        const int byte = (kw * 2 + i) * 512 + lane * 16, r = byte / turn_row_bytes, c = byte % turn_row_bytes;
        const uint8_t* src = a + (tile * 16 + r) * row_bytes + turn * turn_row_bytes + c;
        cp16((uint32_t)__cvta_generic_to_shared(ring + (issued % kStages) * 1024 + i * 512 + lane * 16), src);
      }
    }
    commit(); ++issued;
  };
  const unsigned acc = stream_ring<kStages>(units, ring, lane, issue);
  if (acc == 0x12345678u) *sink = acc;
}

// Tiles of kRows rows (16 is the GEMV's): the warp's kilobyte per step covers kRows rows x
// 1024 / kRows bytes, lanes in row order; groups of wk warps take turns along the row as before.
template <int kRows>
__global__ void __launch_bounds__(512, 2) gemv_rows_per_tile(const uint8_t* a, int64_t rows, int64_t row_bytes, int wk, unsigned* sink) {
  constexpr int kStages = 4, kPieceBytes = 1024 / kRows, kChunksPerRow = kPieceBytes / 16;
  extern __shared__ __align__(16) uint8_t smem[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  uint8_t* ring = smem + warp * kStages * 1024;
  const int groups = (blockDim.x / 32) / wk, group = warp / wk, kw = warp % wk;
  const int64_t tiles = rows / kRows;
  const int2 share = share_of(tiles, groups, group, wk);
  const int segs = (int)(row_bytes / kPieceBytes), count = (segs - kw + wk - 1) / wk;
  const int units = (share.y - share.x) * count;
  int issued = 0;
  auto issue = [&]() {
    if (issued < units) {
      const int64_t tile = share.x + issued / count; const int seg = kw + (issued % count) * wk;
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int q = c * 32 + lane, r = q / kChunksPerRow, col = q % kChunksPerRow;
        cp16((uint32_t)__cvta_generic_to_shared(ring + (issued % kStages) * 1024 + q * 16),
             a + (tile * kRows + r) * row_bytes + seg * kPieceBytes + col * 16);
      }
    }
    commit(); ++issued;
  };
  const unsigned acc = stream_ring<kStages>(units, ring, lane, issue);
  if (acc == 0x12345678u) *sink = acc;
}

// The GEMV pattern through registers instead of shared memory: the same turns and lanes, each lane
// keeping its next kDepth segments (rows g and g + 8) in flight as streamed 16-byte loads.
__device__ __forceinline__ uint4 ld_streamed(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
template <int kDepth>
__global__ void __launch_bounds__(512, 2) gemv_pattern_regs(const uint8_t* a, int64_t rows, int64_t row_bytes, int wk, unsigned* sink) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const int groups = (blockDim.x / 32) / wk, group = warp / wk, kw = warp % wk;
  const int64_t tiles = rows / 16;
  const int2 share = share_of(tiles, groups, group, wk);
  const int segs = (int)(row_bytes / 64), count = (segs - kw + wk - 1) / wk;
  const int units = (share.y - share.x) * count;
  const auto src = [&](int u) {
    const int64_t tile = share.x + u / count; const int seg = kw + (u % count) * wk;
    return a + (tile * 16 + g) * row_bytes + seg * 64 + 16 * t;
  };
  unsigned acc = 0;
  int u = 0;
  for (; u + kDepth <= units; u += kDepth) {
    uint4 v[kDepth], w[kDepth];
#pragma unroll
    for (int i = 0; i < kDepth; ++i) v[i] = ld_streamed(src(u + i)), w[i] = ld_streamed(src(u + i) + 8 * row_bytes);
#pragma unroll
    for (int i = 0; i < kDepth; ++i) acc += v[i].x ^ w[i].y;
  }
  for (; u < units; ++u) acc += ld_streamed(src(u)).x ^ ld_streamed(src(u) + 8 * row_bytes).y;
  if (acc == 0x12345678u) *sink = acc;
}

int main() {
  int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const size_t max_bytes = 16384ull * 8192;
  uint8_t *a, *flush; unsigned* sink; const size_t flush_bytes = 256ull << 20;
  CK(cudaMalloc(&a, max_bytes)); CK(cudaMalloc(&flush, flush_bytes)); CK(cudaMalloc(&sink, 4));
  CK(cudaMemset(a, 1, max_bytes)); CK(cudaMemset(flush, 0, flush_bytes)); g_sink = sink; g_sms = sms;
  // The GEMV shapes (M, K, L) as rows (M * L) of K / 2 bytes: 16384^2, (4096, 7168, 8),
  // (7168, 2048, 4), (7168, 16384, 1).
  struct Shape { int64_t rows, row_bytes; } shapes[] = {{16384, 8192}, {4096 * 8, 3584}, {7168 * 4, 1024}, {7168, 8192}};
  auto run = [&](auto kern_c, auto kern_g, auto kern_r, int stages) {
    const size_t smem = 16 * stages * 1024;
    cudaFuncSetAttribute(kern_c, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    cudaFuncSetAttribute(kern_g, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    cudaFuncSetAttribute(kern_r, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    int per_sm_c = 0, per_sm_g = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm_c, kern_c, 512, smem);
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm_g, kern_g, 512, smem);
    for (auto sh : shapes) {
      const size_t bytes = sh.rows * sh.row_bytes;
      // warps_k as the library picks it: clamp(segments / 4, 1, 8), 64-byte segments
      const int wk = sh.row_bytes / 64 / 4 < 1 ? 1 : (sh.row_bytes / 64 / 4 > 8 ? 8 : sh.row_bytes / 64 / 4);
      const int warps = 16 / wk * wk;
      float tc = time_ms([&] { kern_c<<<per_sm_c * sms, 512, smem>>>(a, bytes, sink); }, flush, flush_bytes);
      float tg = time_ms([&] { kern_g<<<per_sm_g * sms, warps * 32, smem>>>(a, sh.rows, sh.row_bytes, wk, sink); }, flush, flush_bytes);
      float tr = time_ms([&] { kern_r<<<per_sm_g * sms, warps * 32, smem>>>(a, sh.rows, sh.row_bytes, wk, sink); }, flush, flush_bytes);
      float tp = time_ms([&] { plain_read<<<sms * 4, 512>>>((const uint4*)a, bytes / 16, sink); }, flush, flush_bytes);
      printf("| %6.1f MB | %6lld x %5lld B | %d | %7.2f us, %5.0f GB/s | %7.2f us, %5.0f GB/s | %7.2f us, %5.0f GB/s | %7.2f us, %5.0f GB/s |\n",
             bytes / 1e6, (long long)sh.rows, (long long)sh.row_bytes, wk, tp * 1e3, bytes / tp / 1e6, tc * 1e3,
             bytes / tc / 1e6, tg * 1e3, bytes / tg / 1e6, tr * 1e3, bytes / tr / 1e6);
    }
  };
  printf("| bytes | rows x bytes | warps_k | plain | contiguous | gemv pattern | rows |\n|---|---|---|---|---|---|---|\n");
  run(contiguous<4>, gemv_pattern<4>, gemv_rows<4>, 4);
  // The GEMV pattern's knobs: warps per tile (groups reading 16 rows x wk * 64 B per turn), the L2
  // prefetch hint of the copies, registers instead of a shared-memory ring.
  printf("\n| rows x bytes | warps_k | cp.async, L2::128B | no hint | L2::256B | registers, 4 deep |\n|---|---|---|---|---|---|\n");
  {
    const size_t smem = 16 * 4 * 1024;
    const auto k128 = gemv_pattern<4, 128>, k0 = gemv_pattern<4, 0>, k256 = gemv_pattern<4, 256>;
    for (auto k : {k128, k0, k256}) cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    int per_sm = 0, per_sm_r = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k128, 512, smem);
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm_r, gemv_pattern_regs<4>, 512, 0);
    for (auto sh : shapes) {
      const size_t bytes = sh.rows * sh.row_bytes;
      for (int wk : {2, 4, 8, 16}) {
        if (sh.row_bytes / 64 < wk) continue;
        const auto bw = [&](auto kern, int ctas, size_t sm) {
          const float ms = time_ms([&] { kern<<<ctas, 512, sm>>>(a, sh.rows, sh.row_bytes, wk, sink); }, flush, flush_bytes);
          return bytes / ms / 1e6;
        };
        printf("| %6lld x %5lld B | %2d | %5.0f GB/s | %5.0f GB/s | %5.0f GB/s | %5.0f GB/s |\n", (long long)sh.rows,
               (long long)sh.row_bytes, wk, bw(k128, per_sm * sms, smem), bw(k0, per_sm * sms, smem),
               bw(k256, per_sm * sms, smem), bw(gemv_pattern_regs<4>, per_sm_r * sms, 0));
      }
    }
  }
  // Fewer rows per tile, longer pieces of each row per warp step.
  printf("\n| rows x bytes | warps_k | 16 rows x 64 B | 8 x 128 B | 4 x 256 B | 2 x 512 B |\n|---|---|---|---|---|---|\n");
  {
    const size_t smem = 16 * 4 * 1024;
    const auto k16 = gemv_rows_per_tile<16>, k8 = gemv_rows_per_tile<8>, k4 = gemv_rows_per_tile<4>, k2 = gemv_rows_per_tile<2>;
    for (auto k : {k16, k8, k4, k2}) cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    int per_sm = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k16, 512, smem);
    for (auto sh : shapes) {
      const size_t bytes = sh.rows * sh.row_bytes;
      for (int wk : {4, 8, 16}) {
        const auto bw = [&](auto kern) {
          const float ms = time_ms([&] { kern<<<per_sm * sms, 512, smem>>>(a, sh.rows, sh.row_bytes, wk, sink); }, flush, flush_bytes);
          return bytes / ms / 1e6;
        };
        printf("| %6lld x %5lld B | %2d | %5.0f GB/s | %5.0f GB/s | %5.0f GB/s | %5.0f GB/s |\n", (long long)sh.rows,
               (long long)sh.row_bytes, wk, bw(k16), bw(k8), bw(k4), bw(k2));
      }
    }
  }
  CK(cudaGetLastError());
  return 0;
}
