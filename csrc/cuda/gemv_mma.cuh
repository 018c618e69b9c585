// Tensor-core batched FP4 GEMV (SPEC 5) for K a multiple of 128: y[l, m] = sum_k A[l,m,k] B[l,k].
//
// Why tensor cores on a bandwidth-bound op: the CUDA-core kernel (gemv_kernels.cuh) spends ~9
// instructions per element decoding and multiplying in fp32 and is ALU-bound near half the memory
// bandwidth. Here A is decoded straight into mma.sync operands (exactly, times a power of two:
// mma_fragments.cuh) and the tensor cores (fp16/bf16 m16n8k16, fp32 accumulators) do the
// multiply-adds. FP4 B is widened to fp16 like A: sm_90 has no E4M3 mma.sync in hardware (ptxas
// lowers it to conversions plus fp16 HMMAs), so that detour bought nothing.
//
// Layout. Each 16-row MMA tile is reduced by a group of warps_k warps (warps_k depends on K only,
// so the summation order, and the result, does not depend on the GPU); the warps of a group take
// the tile's K segments of 128 elements in turn. Per segment, lane (g, t) (g = lane / 4,
// t = lane % 4) loads 16 bytes of row g and of row g + 8: the row's elements [32t, 32t + 32), i.e.
// whole scale blocks. An MMA sums over the k-slots of all four lanes t, so it mixes four different
// scale blocks. B's eight columns keep them apart: column n of the B operand holds B's values only
// in the k-slots of the lane whose blocks belong to column n (zeros elsewhere), so D[row, n] is the
// exact partial sum of one scale block:
//   NVFP4 (block 16): lane t's first block -> column 2t, its second -> column 2t + 1;
//   MXFP4 (block 32): lane t's block -> column t (columns 4..7 stay zero).
// Schedule. The grid is sized to be resident at once (CTAs of up to 16 warps, blockIdx.y the batch
// index) and every group streams an even, contiguous share of its batch's tiles: the per-warp
// cp.async ring runs on across tile boundaries, so a warp's loads stay in flight from its first
// segment to its last instead of draining and refilling once per tile. Measured against one tile
// per CTA: +2-4 points of copy bandwidth at (4096, 7168, 8) and for bf16 B at 2^28 weights, no
// change on the short seed shape (7168, 2048, 4), which is bound by instruction issue instead
// (docs/performance.md).
// B never changes within a CTA, so the CTA's warps stage the B operand registers once, in shared
// memory, in exactly the order the lanes read them (plus a zero run per warp for lanes whose
// column is not the active one). After each segment the four partials a lane holds are scaled in
// fp32 (block scale times B's block scale, NaN propagating) and added to two per-row sums; at the
// end of a tile the lanes and the group's warps combine them in a fixed order, so results are
// bitwise reproducible.
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
constexpr int kMmaMaxWarps = 8;          // per tile (warps_k)
constexpr int kMmaMaxWarpsPerCta = 16;   // groups of warps_k warps, sharing B's staged operands
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
  // slot; per warp two sets (by tile parity) of 16 row partials.
  static constexpr size_t ring_bytes(int warps) { return static_cast<size_t>(warps) * kMmaStages * kStageBytes; }
  static constexpr size_t slots_bytes(int64_t segments) { return static_cast<size_t>(segments) * 4 * kSlotBytes; }
  static constexpr size_t scales_bytes(int64_t segments) {
    return kFp4B ? static_cast<size_t>(segments) * kBlocksPerSegment * sizeof(uint32_t) : 0;
  }
  static constexpr size_t per_warp_tail_bytes() { return kSlotBytes / 2 + 2 * kMmaTileRows * sizeof(float); }
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

// Shared-memory loads by 32-bit shared address: the hot loop keeps its addresses as offsets that
// advance by constants, instead of generic pointers the compiler re-derives every iteration.
__device__ __forceinline__ uint4 lds_128(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr));
  return v;
}
__device__ __forceinline__ uint32_t lds_u16(uint32_t addr) {
  unsigned short v;
  asm volatile("ld.shared.u16 %0, [%1];" : "=h"(v) : "r"(addr));
  return v;
}
__device__ __forceinline__ uint32_t lds_u32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(addr));
  return v;
}
__device__ __forceinline__ uint32_t shared_address(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

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

// Named barrier over one group's warps (ids 1..15; 0 is __syncthreads).
__device__ __forceinline__ void group_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(threads) : "memory");
}

// How a batch's 16-row tiles are shared among the groups of the grid: group i (of
// gridDim.x * groups) takes the contiguous tiles [share_begin(i), share_begin(i + 1)), the first
// `extra` groups one tile more than the others. The launcher divides, so the kernel does not
// (a 64-bit division is ~70 instructions, a visible share of a warp's fixed cost on short rows).
struct MmaSchedule {
  int warps_k;            // warps per 16-row tile (depends on K only: it fixes the summation order)
  int64_t tiles_per_group;
  int64_t extra;          // tiles % groups of the grid

  __device__ __forceinline__ int64_t share_begin(int64_t i) const { return i * tiles_per_group + (i < extra ? i : extra); }
};

// The ring offset after `offset`: stages of kStageBytes, wrapping after kMmaStages.
template <int kStageBytes>
__device__ __forceinline__ uint32_t next_stage_offset(uint32_t offset) {
  return offset == (kMmaStages - 1) * kStageBytes ? 0 : offset + kStageBytes;
}

template <class Format, typename BT, typename OutT>
__global__ void __launch_bounds__(kMmaMaxWarpsPerCta * 32)
    gemv_mma_kernel(GemvArgs args, OutT* __restrict__ out, MmaSchedule schedule) {
  using Layout = MmaGemvLayout<Format, BT>;
  constexpr int kBlocks = Layout::kBlocksPerSegment;
  extern __shared__ __align__(16) uint8_t smem[];

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const int warps_k = schedule.warps_k;
  const int groups = warps / warps_k;
  const int group = warp / warps_k, kw = warp % warps_k;  // this warp's group and turn along K
  const int g = lane / 4, t = lane % 4;
  const int64_t l = blockIdx.y;
  const int segments = static_cast<int>(args.k / kSegmentElems);
  // Warp kw takes segments kw, kw + warps_k, ... of each tile: at any moment a group's warps read
  // adjacent segments of each row, i.e. contiguous runs of DRAM, and adjacent scale bytes.
  const int count = (segments - kw + warps_k - 1) / warps_k;

  // This group's tiles of batch l: an even, contiguous share.
  const int64_t group_index = static_cast<int64_t>(blockIdx.x) * groups + group;
  const int64_t tile_begin = schedule.share_begin(group_index);
  const int64_t tile_end = schedule.share_begin(group_index + 1);
  const int units = static_cast<int>(tile_end - tile_begin) * count;  // this warp's segments in all

  uint8_t* ring = smem + static_cast<size_t>(warp) * kMmaStages * Layout::kStageBytes;
  uint8_t* slots = smem + Layout::ring_bytes(warps);
  uint32_t* b_scales = reinterpret_cast<uint32_t*>(slots + Layout::slots_bytes(segments));
  uint8_t* zero_runs = slots + Layout::slots_bytes(segments) + Layout::scales_bytes(segments);
  uint8_t* zeros = zero_runs + warp * (Layout::kSlotBytes / 2);
  float* row_partials = reinterpret_cast<float*>(zero_runs + warps * (Layout::kSlotBytes / 2));  // [warp][2][16]

  // Rows past M (last tile of a batch) read row M - 1 and are never stored.
  const int64_t last_row = args.m - 1, k_bytes = args.k / 2, k_blocks = args.k / Format::kBlock;
  const auto row_address = [&](int64_t tile, int r) {
    const int64_t row = tile * kMmaTileRows + r;
    return l * args.m + (row < last_row ? row : last_row);
  };

  // Segment i of this warp -> stage i % kMmaStages: lane (g, t) copies its own 16 bytes of rows g
  // and g + 8; lanes 0..15 copy one row's scale bytes each. One commit group per segment (empty
  // past the end, so the wait count below stays uniform). The sources advance by one turn per
  // segment and jump to the next tile's rows after the tile's last one; the destination offset
  // cycles through the ring.
  const uint8_t *next_g, *next_g8, *next_scales;
  const auto point_at_tile = [&](int64_t tile) {
    next_g = args.a_data + row_address(tile, g) * k_bytes + 16 * t + kw * 64;
    next_g8 = args.a_data + row_address(tile, g + 8) * k_bytes + 16 * t + kw * 64;
    next_scales = args.a_scales + row_address(tile, lane % kMmaTileRows) * k_blocks + kw * kBlocks;
  };
  point_at_tile(tile_begin);
  const uint32_t ring_codes = shared_address(ring) + g * 64 + 16 * t;  // this lane's 16 bytes of row g
  const uint32_t ring_scales = shared_address(ring) + Layout::kStageCodeBytes + lane * kBlocks;
  const int64_t code_step = 64 * warps_k, scale_step = kBlocks * warps_k;
  uint32_t issue_offset = 0;  // (issued % kMmaStages) * kStageBytes
  int issued = 0, issue_turn = 0;
  int64_t issue_tile = tile_begin;
  const auto issue = [&]() {
    if (issued < units) {
      cp_async_16_streaming(ring_codes + issue_offset, next_g);
      cp_async_16_streaming(ring_codes + issue_offset + 8 * 64, next_g8);
      if (lane < kMmaTileRows) cp_async_small<kBlocks>(ring_scales + issue_offset, next_scales);
      if (++issue_turn == count) {
        issue_turn = 0;
        point_at_tile(++issue_tile);
      } else {
        next_g += code_step, next_g8 += code_step, next_scales += scale_step;
      }
    }
    cp_async_commit();
    issue_offset = next_stage_offset<Layout::kStageBytes>(issue_offset);
    ++issued;
  };
#pragma unroll
  for (int i = 0; i < kMmaStages - 1; ++i) issue();

  // B's operands are staged by all the CTA's warps while the first A segments are on their way.
  stage_b_segments<Format, BT>(args, l, warp, warps, (segments - warp + warps - 1) / warps, slots, b_scales, lane);
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

  // Shared addresses the loop advances: B's half-slots for this lane (or its zero run, which does
  // not advance) and FP4 B's block scales, per segment by one turn (warps_k segments).
  const uint32_t slot0 = shared_address(slots) + (kw * 4 + t) * Layout::kSlotBytes;
  const uint32_t slot_step = warps_k * 4 * Layout::kSlotBytes, zeros_address = shared_address(zeros);
  const uint32_t b_half0_first = live_half0 ? slot0 : zeros_address, b_half0_step = live_half0 ? slot_step : 0;
  const uint32_t b_half1_first = live_half1 ? slot0 + Layout::kSlotBytes / 2 : zeros_address;
  const uint32_t b_half1_step = live_half1 ? slot_step : 0;
  const uint32_t b_scales_first = shared_address(b_scales) + (kw * kBlocks + 2 * t) * sizeof(uint32_t);
  const uint32_t b_scales_step = warps_k * kBlocks * sizeof(uint32_t);
  uint32_t b_half0 = b_half0_first, b_half1 = b_half1_first, b_scale = b_scales_first;

  float acc_g = 0.0f, acc_g8 = 0.0f;
  const uint32_t ring_base = shared_address(ring);
  const auto process_segment = [&](uint32_t stage_offset) {
    const uint32_t codes = ring_codes + stage_offset;  // row g; row g + 8 is 8 * 64 bytes on
    const uint4 row_g = lds_128(codes), row_g8 = lds_128(codes + 8 * 64);
    const uint32_t words_g[4] = {row_g.x, row_g.y, row_g.z, row_g.w};
    const uint32_t words_g8[4] = {row_g8.x, row_g8.y, row_g8.z, row_g8.w};
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      using MmaT = typename Layout::MmaT;
      const uint4 bw = lds_128((j < 2 ? b_half0 : b_half1) + (j % 2) * (Layout::kSlotBytes / 4));
      const Regs4 x = DenseOperand<MmaT>::decode(words_g[j]), y = DenseOperand<MmaT>::decode(words_g8[j]);
      mma_m16n8k16<MmaT>(d, {x.reg[0], y.reg[0], x.reg[1], y.reg[1]}, bw.x, bw.y);
      mma_m16n8k16<MmaT>(d, {x.reg[2], y.reg[2], x.reg[3], y.reg[3]}, bw.z, bw.w);
    }
    if (!has_columns) return;
    // d = {D[g][2t], D[g][2t+1], D[g+8][2t], D[g+8][2t+1]}: blocks 2t and 2t + 1 of rows g, g + 8.
    const uint32_t stage_scales = ring_base + stage_offset + Layout::kStageCodeBytes + scale_offset;
    const uint32_t scales_g = lds_u16(stage_scales + g * kBlocks);
    const uint32_t scales_g8 = lds_u16(stage_scales + (g + 8) * kBlocks);
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
      if constexpr (Layout::kFp4B) {
        const uint32_t sb = lds_u32(b_scale + (i % 2) * sizeof(uint32_t));  // B's block 2t + i % 2
        if constexpr (Layout::kNvfp4) {
          partial[i] = mul_rn(mul_rn(d[i], sa[i]), bits_to_float(sb));  // sb * 2^-kDecodeExponent
        } else {
          partial[i] = scale_by_e8m0_pair(d[i], sa_codes[i], sb, -Layout::kDecodeExponent);
        }
      } else if constexpr (Layout::kNvfp4) {
        partial[i] = mul_rn(d[i], undo(sa[i]));  // sa * 2^14 <= 448 * 2^14
      } else {
        partial[i] = mul_rn(undo(d[i]), sa[i]);
      }
    }
    acc_g = __fadd_rn(__fadd_rn(acc_g, partial[0]), partial[1]);
    acc_g8 = __fadd_rn(__fadd_rn(acc_g8, partial[2]), partial[3]);
  };

  // The global scales, read once (a missing one is 1: multiplying by it is exact).
  const float a_global = args.a_global != nullptr ? *args.a_global : 1.0f;
  const float b_global = args.b_global != nullptr ? *args.b_global : 1.0f;
  const auto store_row = [&](int64_t row, float y) {
    if (row >= args.m) return;
    out[l * args.m + row] = from_float<OutT>(mul_rn(mul_rn(y, a_global), b_global));
  };
  // End of a tile: lanes t of a quad hold the same rows' sums over different blocks: a fixed
  // butterfly, then one partial per warp and row, summed over the group's warps in order (the
  // partials alternate between two buffers by tile parity, so one barrier per tile suffices:
  // a buffer is rewritten only after the next tile's barrier, which its reader has passed).
  const auto finish_tile = [&](int64_t tile, int parity) {
#pragma unroll
    for (int offset = 1; offset < 4; offset *= 2) {
      acc_g = __fadd_rn(acc_g, __shfl_xor_sync(0xFFFFFFFFu, acc_g, offset));
      acc_g8 = __fadd_rn(acc_g8, __shfl_xor_sync(0xFFFFFFFFu, acc_g8, offset));
    }
    const int64_t row0 = tile * kMmaTileRows;
    if (warps_k == 1) {
      if (t == 0) store_row(row0 + g, acc_g), store_row(row0 + g + 8, acc_g8);
    } else {
      float* mine = row_partials + (warp * 2 + parity) * kMmaTileRows;
      if (t == 0) mine[g] = acc_g, mine[g + 8] = acc_g8;
      group_barrier(1 + group, warps_k * 32);
      if (kw == 0 && lane < kMmaTileRows) {
        float y = mine[lane];
        for (int w = 1; w < warps_k; ++w) y = __fadd_rn(y, mine[w * 2 * kMmaTileRows + lane]);
        store_row(row0 + lane, y);
      }
    }
    acc_g = 0.0f, acc_g8 = 0.0f;
  };

  int turn = 0, parity = 0;
  int64_t tile = tile_begin;
  uint32_t stage_offset = 0;
  for (int i = 0; i < units; ++i) {
    cp_async_wait<kMmaStages - 2>();  // this lane's copies of segment i have landed ...
    __syncwarp();                      // ... and every lane's (scale rows); stage (i - 1) is free
    issue();  // segment i + kMmaStages - 1
    process_segment(stage_offset);
    stage_offset = next_stage_offset<Layout::kStageBytes>(stage_offset);
    b_half0 += b_half0_step, b_half1 += b_half1_step, b_scale += b_scales_step;
    if (++turn == count) {
      finish_tile(tile++, parity);
      turn = 0, parity ^= 1;
      b_half0 = b_half0_first, b_half1 = b_half1_first, b_scale = b_scales_first;
    }
  }
}

}  // namespace fp4ops::cuda
