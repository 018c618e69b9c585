// Batched FP4 GEMV (SPEC 5): y[l, m] = sum_k A[l, m, k] * B[l, k]. Raw pointers, no torch.
//
// One warp per output row. Each lane streams kPerLane consecutive elements of A per step (16 or 8
// bytes, a streaming load that skips L1), decodes them exactly to fp32 and multiplies them with B
// (hot in L1/L2: every row of a batch index reads the same B). Per scale block the exact-product
// partial sum is scaled in fp32; lanes then combine in a fixed butterfly order, so results are
// bitwise reproducible run to run. A NaN scale or input propagates to its row.
#pragma once

#include <cstdint>
#include <type_traits>

#include "../common/block_formats.h"
#include "element_types.cuh"

namespace fp4ops::cuda {

struct GemvArgs {
  const uint8_t* a_data;     // [rows, K/2]
  const uint8_t* a_scales;   // [rows, K/block]
  const float* a_global;     // NVFP4 global scale of A, or nullptr
  const void* b;             // [L, K] fp16/bf16, or uint8 [L, K/2] packed E2M1
  const uint8_t* b_scales;   // [L, K/block] for FP4 B, else nullptr
  const float* b_global;     // NVFP4 global scale of B, or nullptr
  int64_t rows, m, k;        // rows = L * M
};

template <int kBytes>
__device__ __forceinline__ void load_streaming_bytes(const uint8_t* p, uint32_t (&words)[kBytes / 4]) {
  if constexpr (kBytes == 16) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    words[0] = v.x, words[1] = v.y, words[2] = v.z, words[3] = v.w;
  } else {
    uint2 v;
    asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
    words[0] = v.x, words[1] = v.y;
  }
}

// B[e0 .. e0 + kN) as fp32 through the read-only cache (B is shared by every row of its batch
// index): 16-byte loads of fp16/bf16 (16-byte aligned: the launcher guarantees it), or the packed
// E2M1 codes (BT = uint8_t) decoded exactly.
template <typename BT, int kN>
__device__ __forceinline__ void load_b(const BT* b_row, int64_t e0, float (&v)[kN]) {
  if constexpr (std::is_same_v<BT, uint8_t>) {
    const uint8_t* p = b_row + e0 / 2;
#pragma unroll
    for (int w = 0; w < kN / 8; ++w) {
      const uint32_t word = __ldg(reinterpret_cast<const unsigned int*>(p) + w);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const Float2 pair = e2m1x2_decode((word >> (8 * j)) & 0xFFu);
        v[8 * w + 2 * j] = pair.even;
        v[8 * w + 2 * j + 1] = pair.odd;
      }
    }
  } else {
#pragma unroll
    for (int w = 0; w < kN / 8; ++w) {
      const uint4 raw = __ldg(reinterpret_cast<const uint4*>(b_row + e0) + w);
      const BT* values = reinterpret_cast<const BT*>(&raw);
#pragma unroll
      for (int j = 0; j < 8; ++j) v[8 * w + j] = to_float(values[j]);
    }
  }
}

// The block-scale decoder of a format without the NVFP4 global scale (applied once per row).
template <class Format>
__device__ __forceinline__ Format format_without_global_scale() {
  if constexpr (std::is_same_v<Format, Nvfp4Format>) {
    return Nvfp4Format{1.0f};
  } else {
    return Mxfp4Format{Mxfp4ScaleRule::kFloor};
  }
}

template <class Format, typename BT, int kPerLane, typename OutT>
__global__ void gemv_kernel(GemvArgs args, OutT* __restrict__ out) {
  constexpr int kBlock = Format::kBlock;
  constexpr bool kFp4B = std::is_same_v<BT, uint8_t>;
  static_assert(kPerLane % kBlock == 0, "a lane's span holds whole scale blocks");
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= args.rows) return;  // whole warps leave together
  const int64_t l = row / args.m;
  const int64_t blocks_per_row = args.k / kBlock;
  const uint8_t* a_row = args.a_data + row * (args.k / 2);
  const uint8_t* sa_row = args.a_scales + row * blocks_per_row;
  const BT* b_row = static_cast<const BT*>(args.b) + l * (kFp4B ? args.k / 2 : args.k);
  const uint8_t* sb_row = kFp4B ? args.b_scales + l * blocks_per_row : nullptr;
  const Format format = format_without_global_scale<Format>();

  float acc = 0.0f;
  for (int64_t e0 = static_cast<int64_t>(lane) * kPerLane; e0 < args.k; e0 += 32 * kPerLane) {
    uint32_t words[kPerLane / 8];
    load_streaming_bytes<kPerLane / 2>(a_row + e0 / 2, words);
    float b[kPerLane];
    load_b<BT>(b_row, e0, b);
#pragma unroll
    for (int blk = 0; blk < kPerLane / kBlock; ++blk) {
      float partial = 0.0f;
#pragma unroll
      for (int i = 0; i < kBlock; i += 2) {
        const int idx = blk * kBlock + i;  // even: one byte holds elements idx and idx + 1
        const Float2 a = e2m1x2_decode((words[idx / 8] >> (4 * (idx % 8))) & 0xFFu);
        partial = __fmaf_rn(a.even, b[idx], partial);  // each product is exact in fp32
        partial = __fmaf_rn(a.odd, b[idx + 1], partial);
      }
      const int64_t block_index = (e0 + blk * kBlock) / kBlock;
      float scaled = mul_rn(partial, format.decode_scale(__ldg(sa_row + block_index)));
      if constexpr (kFp4B) scaled = mul_rn(scaled, format.decode_scale(__ldg(sb_row + block_index)));
      acc = __fadd_rn(acc, scaled);
    }
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) acc = __fadd_rn(acc, __shfl_xor_sync(0xFFFFFFFFu, acc, offset));
  if (lane == 0) {
    if (args.a_global != nullptr) acc = mul_rn(acc, *args.a_global);
    if (args.b_global != nullptr) acc = mul_rn(acc, *args.b_global);
    out[row] = from_float<OutT>(acc);
  }
}

}  // namespace fp4ops::cuda
