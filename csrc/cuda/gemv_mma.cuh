// Tensor-core batched FP4 GEMV (SPEC 5) for K a multiple of 128: y[l, m] = sum_k A[l,m,k] B[l,k].
//
// Why tensor cores on a bandwidth-bound op: the CUDA-core kernel (gemv_kernels.cuh) spends ~9
// instructions per element decoding and multiplying in fp32 and is ALU-bound near half the memory
// bandwidth. Here A is decoded straight into mma.sync operands (exactly, times a power of two:
// mma_fragments.cuh) and the tensor cores (fp16/bf16 m16n8k16, fp32 accumulators) do the
// multiply-adds. FP4 B is widened to fp16 like A: sm_90 has no E4M3 mma.sync in hardware (ptxas
// lowers it to conversions plus fp16 HMMAs), so that detour bought nothing.
//
// Layout. A CTA owns one or two 16-row MMA tiles of one batch index; each tile's warps take
// K's 128-element segments in turn. Per segment, lane (g, t) (g = lane / 4, t = lane % 4) loads 16
// bytes of row g and of row g + 8: the row's elements [32t, 32t + 32), i.e. whole scale blocks. An
// MMA sums over the k-slots of all four lanes t, so it mixes four different scale blocks. B's eight
// columns keep them apart: column n of the B operand holds B's values only in the k-slots of the
// lane whose blocks belong to column n (zeros elsewhere), so D[row, n] is the exact partial sum of
// one scale block:
//   NVFP4 (block 16): lane t's first block -> column 2t, its second -> column 2t + 1;
//   MXFP4 (block 32): lane t's block -> column t (columns 4..7 stay zero).
// A streams through a per-warp shared-memory ring filled by cp.async (3 segments in flight per warp
// without holding registers). B never changes within a CTA, so the first tile's warps stage the B
// operand registers once, in shared memory, in exactly the order the lanes read them (plus a zero
// run per warp for lanes whose column is not the active one). After each segment the four partials
// a lane holds are scaled in fp32 (block scale times B's block scale, NaN propagating) and added to
// two per-row sums; lanes and warps then combine in a fixed order, so results are bitwise
// reproducible.
#pragma once

#include <cstdint>
#include <type_traits>

#include "../common/block_formats.h"
#include "element_types.cuh"
#include "gemv_kernels.cuh"
#include "mma_fragments.cuh"

namespace fp4ops::cuda {

constexpr int kMmaTileRows = 16;
constexpr int kSegmentElems = 128;  // per row and warp step: 4 lanes x 32 elements
constexpr int kMmaMaxWarps = 8;     // per tile
// Up to two tiles per CTA, whose warps share one copy of B's staged operands; the launcher takes
// two where one-tile CTAs would be too few for the GPU (see gemv.cu).
constexpr int kMmaMaxTilesPerCta = 2;
constexpr int kMmaStages = 4;  // A ring depth per warp: 3 segments (3 KB) in flight

template <class Format, typename BT>
struct MmaGemvLayout {
  static constexpr bool kFp4B = std::is_same_v<BT, uint8_t>;
  static constexpr bool kNvfp4 = std::is_same_v<Format, Nvfp4Format>;
  static constexpr int kBlocksPerSegment = kSegmentElems / Format::kBlock;  // 8 or 4
  // The MMA's element type: FP4 B is widened to fp16 like A (E2M1 values are exact in fp16).
  using MmaT = std::conditional_t<kFp4B, __half, BT>;
  // One slot = the B operand registers for one lane t's 32 elements: 16 fp16/bf16 pairs. Four
  // slots per segment.
  static constexpr int kSlotBytes = 64;
  // One A stage = one segment of the tile: 16 rows x 64 bytes of codes, then 16 rows of scales.
  static constexpr int kStageCodeBytes = kMmaTileRows * kSegmentElems / 2;
  static constexpr int kStageBytes = kStageCodeBytes + kMmaTileRows * kBlocksPerSegment;
  // Power of two the decoded operands carry (A's and, for FP4 B, B's): undone in fp32.
  static constexpr int kDecodeExponent = (kFp4B ? 2 : 1) * DenseOperand<MmaT>::kDecodeExponent;

  // Shared memory, in order: per warp an A ring of kMmaStages stages; B slots [segment][t]; FP4
  // B's block scales [segment][block] (fp32 bits or E8M0 codes); per warp a zero run of half a
  // slot; per warp 16 row partials.
  static constexpr size_t ring_bytes(int warps) { return static_cast<size_t>(warps) * kMmaStages * kStageBytes; }
  static constexpr size_t slots_bytes(int64_t segments) { return static_cast<size_t>(segments) * 4 * kSlotBytes; }
  static constexpr size_t scales_bytes(int64_t segments) {
    return kFp4B ? static_cast<size_t>(segments) * kBlocksPerSegment * sizeof(uint32_t) : 0;
  }
  static constexpr size_t per_warp_tail_bytes() { return kSlotBytes / 2 + kMmaTileRows * sizeof(float); }
  static constexpr size_t smem_bytes(int64_t segments, int warps) {
    return ring_bytes(warps) + slots_bytes(segments) + scales_bytes(segments) + warps * per_warp_tail_bytes();
  }
};

// Asynchronous global -> shared copies (cp.async): A streams through shared memory without holding
// registers, so each warp keeps kMmaStages - 1 segments in flight. .cg: cached in L2 only.
// smem_dst: a shared-memory address (__cvta_generic_to_shared).
__device__ __forceinline__ void cp_async_16_streaming(uint32_t smem_dst, const void* src) {
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;" :: "r"(smem_dst), "l"(src));
}
template <int kBytes>
__device__ __forceinline__ void cp_async_small(uint32_t smem_dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" :: "r"(smem_dst), "l"(src), "n"(kBytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" :: "n"(kPending));
}

// Two E4M3 codes (low byte first) -> fp32, exactly (NaN stays NaN), with the sm_89+ cvt.
__device__ __forceinline__ float2 e4m3x2_to_float2(uint32_t codes) {
  uint32_t halves;
  asm("{\n\t.reg .b16 pair;\n\t"
      "cvt.u16.u32 pair, %1;\n\t"
      "cvt.rn.f16x2.e4m3x2 %0, pair;\n\t}"
      : "=r"(halves)
      : "r"(codes));
  return __half22float2(*reinterpret_cast<const __half2*>(&halves));
}

// Writes a warp's B slots (and FP4 B's block scales) for its `count` segments first,
// first + stride, ...
template <class Format, typename BT>
__device__ __forceinline__ void stage_b_segments(const GemvArgs& args, int64_t l, int first, int stride, int count,
                                                 uint8_t* slots, uint32_t* b_scales, int lane) {
  using Layout = MmaGemvLayout<Format, BT>;
  for (int task = lane; task < count * 4; task += 32) {
    const int slot_index = (first + task / 4 * stride) * 4 + task % 4;  // segment * 4 + t
    const int64_t element0 = static_cast<int64_t>(slot_index) * 32;      // segment * 128 + t * 32
    uint4* slot = reinterpret_cast<uint4*>(slots + static_cast<int64_t>(slot_index) * Layout::kSlotBytes);
    if constexpr (Layout::kFp4B) {
      // B's codes through A's own decoder: the same registers, the same power of two.
      const uint4 codes = __ldg(reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(args.b) + l * args.k / 2 + element0 / 2));
      const uint32_t words[4] = {codes.x, codes.y, codes.z, codes.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const Regs4 r = DenseOperand<__half>::decode(words[j]);
        slot[j] = make_uint4(r.reg[0], r.reg[1], r.reg[2], r.reg[3]);
      }
    } else {
      constexpr Pairing kPairing = DenseOperand<BT>::kPairing;
      const uint4* src = reinterpret_cast<const uint4*>(static_cast<const BT*>(args.b) + l * args.k + element0);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint4 raw = __ldg(src + j);  // elements 8j .. 8j + 7 as pairs (0,1) (2,3) (4,5) (6,7)
        const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
        uint32_t regs[4];
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          // register r = (element lo, element hi) in A's decoder order; one byte_perm picks them.
          const int lo = element_for(kPairing, r, 0), hi = element_for(kPairing, r, 1);
          regs[r] = __byte_perm(words[lo / 2], words[hi / 2], (lo % 2 ? 0x32u : 0x10u) | ((hi % 2 ? 0x76u : 0x54u) << 8));
        }
        slot[j] = make_uint4(regs[0], regs[1], regs[2], regs[3]);
      }
    }
  }
  if constexpr (Layout::kFp4B) {
    constexpr int kBlocks = Layout::kBlocksPerSegment;
    const uint8_t* sb = args.b_scales + l * (args.k / Format::kBlock);
    for (int task = lane; task < count * kBlocks; task += 32) {
      const int i = (first + task / kBlocks * stride) * kBlocks + task % kBlocks;
      if constexpr (Layout::kNvfp4) {
        // fp32 bits of the E4M3 scale times 2^-kDecodeExponent, which undoes both operands'
        // decode factors (exact: at most 448 * 2^12).
        b_scales[i] = float_to_bits(mul_rn(e4m3_decode(__ldg(sb + i)), exp2_int(-Layout::kDecodeExponent)));
      } else {
        b_scales[i] = __ldg(sb + i);  // the E8M0 code: combined with A's as an exponent sum
      }
    }
  }
}

template <class Format, typename BT, typename OutT>
__global__ void __launch_bounds__(kMmaMaxWarps * kMmaMaxTilesPerCta * 32)
    gemv_mma_kernel(GemvArgs args, OutT* __restrict__ out, int warps_k) {
  using Layout = MmaGemvLayout<Format, BT>;
  constexpr int kBlocks = Layout::kBlocksPerSegment;
  extern __shared__ __align__(16) uint8_t smem[];

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const int tiles = warps / warps_k;
  const int tile = warp / warps_k, kw = warp % warps_k;  // this warp's tile and turn along K
  const int g = lane / 4, t = lane % 4;
  const int64_t l = blockIdx.y;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * tiles + tile) * kMmaTileRows;
  const int segments = static_cast<int>(args.k / kSegmentElems);
  // Warp w takes segments w, w + warps_k, ...: at any moment the CTA's warps read adjacent
  // segments of each row, i.e. contiguous runs of DRAM, and adjacent scale bytes.
  const int count = (segments - kw + warps_k - 1) / warps_k;

  uint8_t* ring = smem + static_cast<size_t>(warp) * kMmaStages * Layout::kStageBytes;
  uint8_t* slots = smem + Layout::ring_bytes(warps);
  uint32_t* b_scales = reinterpret_cast<uint32_t*>(slots + Layout::slots_bytes(segments));
  uint8_t* zero_runs = slots + Layout::slots_bytes(segments) + Layout::scales_bytes(segments);
  uint8_t* zeros = zero_runs + warp * (Layout::kSlotBytes / 2);
  float* row_partials = reinterpret_cast<float*>(zero_runs + warps * (Layout::kSlotBytes / 2));  // [warp][16]

  // Rows past M (last tile of a batch) read row M - 1 and are never stored.
  const int64_t last_row = args.m - 1;
  const auto tile_row = [&](int r) { return l * args.m + (row0 + r < last_row ? row0 + r : last_row); };
  const int64_t k_bytes = args.k / 2, k_blocks = args.k / Format::kBlock;
  const uint8_t* a_g = args.a_data + tile_row(g) * k_bytes + 16 * t;
  const uint8_t* a_g8 = args.a_data + tile_row(g + 8) * k_bytes + 16 * t;
  const uint8_t* scales_row = args.a_scales + tile_row(lane % kMmaTileRows) * k_blocks;  // lanes < 16 copy them

  // Segment i of this warp -> stage i % kMmaStages: lane (g, t) copies its own 16 bytes of rows g
  // and g + 8; lanes 0..15 copy one row's scale bytes each. One commit group per segment (empty
  // past the end, so the wait count below stays uniform). The sources advance by one segment per
  // call and the destination offset cycles through the ring: recomputing the clamped 64-bit row
  // addresses per segment cost ~70 of the loop's ~250 instructions.
  const uint8_t* next_g = a_g + kw * 64;
  const uint8_t* next_g8 = a_g8 + kw * 64;
  const uint8_t* next_scales = scales_row + kw * kBlocks;
  const uint32_t ring_codes = static_cast<uint32_t>(__cvta_generic_to_shared(ring)) + g * 64 + 16 * t;
  const uint32_t ring_scales = static_cast<uint32_t>(__cvta_generic_to_shared(ring)) + Layout::kStageCodeBytes + lane * kBlocks;
  uint32_t issue_offset = 0;  // (issued % kMmaStages) * kStageBytes
  int issued = 0;
  const auto issue = [&]() {
    if (issued < count) {
      cp_async_16_streaming(ring_codes + issue_offset, next_g);
      cp_async_16_streaming(ring_codes + issue_offset + 8 * 64, next_g8);
      if (lane < kMmaTileRows) cp_async_small<kBlocks>(ring_scales + issue_offset, next_scales);
    }
    cp_async_commit();
    next_g += 64 * warps_k, next_g8 += 64 * warps_k, next_scales += kBlocks * warps_k;
    issue_offset = issue_offset == (kMmaStages - 1) * Layout::kStageBytes ? 0 : issue_offset + Layout::kStageBytes;
    ++issued;
  };
#pragma unroll
  for (int i = 0; i < kMmaStages - 1; ++i) issue();

  // B's operands are staged (by the first tile's warps, for the whole CTA) while the first A
  // segments are on their way.
  if (tile == 0) stage_b_segments<Format, BT>(args, l, kw, warps_k, count, slots, b_scales, lane);
  if (lane < Layout::kSlotBytes / 16) reinterpret_cast<uint2*>(zeros)[lane] = make_uint2(0u, 0u);
  __syncthreads();

  // The lane's D columns are 2t and 2t + 1, i.e. blocks 2t, 2t + 1 of the segment; for MXFP4 only
  // lanes t < 2 have real ones (the others read in-bounds bytes and skip the epilogue).
  const bool has_columns = Layout::kNvfp4 || t < 2;
  const int scale_offset = has_columns ? 2 * t : 0;
  // The B column lane (g, t) supplies is g; it is live for lane t's first half-segment (words 0-1)
  // or second (words 2-3) when g is that half's column.
  const bool live_half0 = Layout::kNvfp4 ? g == 2 * t : g == t;
  const bool live_half1 = Layout::kNvfp4 ? g == 2 * t + 1 : g == t;

  float acc_g = 0.0f, acc_g8 = 0.0f;
  const auto process_segment = [&](const uint8_t* stage, int seg) {
    const uint8_t* slot = slots + (static_cast<int64_t>(seg) * 4 + t) * Layout::kSlotBytes;
    const uint8_t* b_half[2] = {live_half0 ? slot : zeros, live_half1 ? slot + Layout::kSlotBytes / 2 : zeros};
    const uint4 row_g = *reinterpret_cast<const uint4*>(stage + g * 64 + 16 * t);
    const uint4 row_g8 = *reinterpret_cast<const uint4*>(stage + (g + 8) * 64 + 16 * t);
    const uint32_t words_g[4] = {row_g.x, row_g.y, row_g.z, row_g.w};
    const uint32_t words_g8[4] = {row_g8.x, row_g8.y, row_g8.z, row_g8.w};
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint8_t* b = b_half[j / 2] + (j % 2) * (Layout::kSlotBytes / 4);
      using MmaT = typename Layout::MmaT;
      const uint4 bw = *reinterpret_cast<const uint4*>(b);
      const Regs4 x = DenseOperand<MmaT>::decode(words_g[j]), y = DenseOperand<MmaT>::decode(words_g8[j]);
      mma_m16n8k16<MmaT>(d, {x.reg[0], y.reg[0], x.reg[1], y.reg[1]}, bw.x, bw.y);
      mma_m16n8k16<MmaT>(d, {x.reg[2], y.reg[2], x.reg[3], y.reg[3]}, bw.z, bw.w);
    }
    if (!has_columns) return;
    // d = {D[g][2t], D[g][2t+1], D[g+8][2t], D[g+8][2t+1]}: blocks 2t and 2t + 1 of rows g, g + 8.
    const uint8_t* stage_scales = stage + Layout::kStageCodeBytes + scale_offset;
    const uint32_t scales_g = *reinterpret_cast<const uint16_t*>(stage_scales + g * kBlocks);
    const uint32_t scales_g8 = *reinterpret_cast<const uint16_t*>(stage_scales + (g + 8) * kBlocks);
    float sa[4];
    const uint32_t sa_codes[4] = {scales_g & 0xFFu, scales_g >> 8, scales_g8 & 0xFFu, scales_g8 >> 8};
    if constexpr (Layout::kNvfp4) {
      const float2 s_g = e4m3x2_to_float2(scales_g), s_g8 = e4m3x2_to_float2(scales_g8);
      sa[0] = s_g.x, sa[1] = s_g.y, sa[2] = s_g8.x, sa[3] = s_g8.y;
    } else if constexpr (!Layout::kFp4B) {
#pragma unroll
      for (int i = 0; i < 4; ++i) sa[i] = e8m0_decode(sa_codes[i]);
    }
    // Undo the operands' power of two (exact: D and the NVFP4 scales are far from the fp32 limits).
    const auto undo = [](float v) { return Layout::kDecodeExponent == 0 ? v : mul_rn(v, exp2_int(-Layout::kDecodeExponent)); };
    float partial[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int column = 2 * t + i % 2;
      if constexpr (Layout::kFp4B && Layout::kNvfp4) {
        partial[i] = mul_rn(mul_rn(d[i], sa[i]), bits_to_float(b_scales[seg * kBlocks + column]));  // sb * 2^-kDecodeExponent
      } else if constexpr (Layout::kFp4B) {
        partial[i] = scale_by_e8m0_pair(d[i], sa_codes[i], b_scales[seg * kBlocks + column], -Layout::kDecodeExponent);
      } else if constexpr (Layout::kNvfp4) {
        partial[i] = mul_rn(d[i], undo(sa[i]));  // sa * 2^14 <= 448 * 2^14
      } else {
        partial[i] = mul_rn(undo(d[i]), sa[i]);
      }
    }
    acc_g = __fadd_rn(__fadd_rn(acc_g, partial[0]), partial[1]);
    acc_g8 = __fadd_rn(__fadd_rn(acc_g8, partial[2]), partial[3]);
  };

  for (int i = 0; i < count; ++i) {
    cp_async_wait<kMmaStages - 2>();  // this lane's copies of segment i have landed ...
    __syncwarp();                      // ... and every lane's (scale rows); stage (i - 1) is free
    issue();  // segment i + kMmaStages - 1
    process_segment(ring + (i % kMmaStages) * Layout::kStageBytes, kw + i * warps_k);
  }

  // Lanes t of a quad hold the same rows' sums over different blocks: a fixed butterfly, then one
  // partial per warp and row, summed over the tile's warps in order.
#pragma unroll
  for (int offset = 1; offset < 4; offset *= 2) {
    acc_g = __fadd_rn(acc_g, __shfl_xor_sync(0xFFFFFFFFu, acc_g, offset));
    acc_g8 = __fadd_rn(acc_g8, __shfl_xor_sync(0xFFFFFFFFu, acc_g8, offset));
  }
  if (t == 0) {
    row_partials[warp * kMmaTileRows + g] = acc_g;
    row_partials[warp * kMmaTileRows + g + 8] = acc_g8;
  }
  __syncthreads();
  if (threadIdx.x < tiles * kMmaTileRows) {
    const int out_tile = threadIdx.x / kMmaTileRows, r = threadIdx.x % kMmaTileRows;
    const int64_t row = (static_cast<int64_t>(blockIdx.x) * tiles + out_tile) * kMmaTileRows + r;
    if (row < args.m) {
      const float* partials = row_partials + out_tile * warps_k * kMmaTileRows + r;
      float y = partials[0];
      for (int w = 1; w < warps_k; ++w) y = __fadd_rn(y, partials[w * kMmaTileRows]);
      if (args.a_global != nullptr) y = mul_rn(y, *args.a_global);
      if (args.b_global != nullptr) y = mul_rn(y, *args.b_global);
      out[l * args.m + row] = from_float<OutT>(y);
    }
  }
}

}  // namespace fp4ops::cuda
