// Tensor-core batched FP4 GEMV (SPEC 5) for K a multiple of 128: y[l, m] = sum_k A[l,m,k] B[l,k].
//
// Why tensor cores on a bandwidth-bound op: the CUDA-core kernel (gemv_kernels.cuh) spends ~9
// instructions per element decoding and multiplying in fp32 and is ALU-bound near half the memory
// bandwidth. Here A is decoded straight into mma.sync operands (exactly, times a power of two:
// mma_fragments.cuh) and the tensor cores (fp16/bf16 m16n8k16, fp32 accumulators) do the
// multiply-adds. FP4 B is widened to fp16 like A: sm_90 has no E4M3 mma.sync in hardware (ptxas
// lowers it to conversions plus fp16 HMMAs), so that detour bought nothing.
//
// Layout. A tile is 8 rows of A; each is reduced by a group of warps_k warps (warps_k depends on M
// and K only, so the summation order, and the result, depends on neither the GPU nor the batch
// count: gemv_warps_per_tile in gemv.cu); the warps of a group take the tile's K segments of 256
// elements (128 bytes per row) in turn. A segment is two ranges of 128 elements. Per segment,
// lane (g, t) (g = lane / 4, t = lane % 4) loads 16 bytes of row g in each range: elements
// [32t, 32t + 32) of range 0 feed MMA row g, those of range 1 MMA row g + 8. Why 8 rows and not 16
// rows of one range: without any arithmetic, 8 rows x 128 bytes per warp step streams ~5% faster
// than 16 rows x 64 bytes (benchmarks/gemv_read_probe.cu; fewer rows in flight at once, why the
// memory system prefers that was not measured).
// An MMA sums over the k-slots of all four lanes t, so it mixes four lanes' elements and two
// ranges. B's eight columns keep them apart: column n < 4 holds range 0's B values only in the
// k-slots of lane n, column 4 + n range 1's in lane n's (zeros elsewhere), so D[r, n] with r and n
// in the same range is the exact sum over one lane's elements of that range (the other half of D
// is discarded). Lane t's 32 elements are one MXFP4 block or two NVFP4 blocks; for NVFP4 the
// MMAs of the first block (words 0-1) and the second (words 2-3) accumulate into separate D
// fragments, so every kept D element is one scale block's partial sum (MXFP4's block is split over
// two fragments, words 0 and 2 / 1 and 3, added in fp32 before scaling).
// Schedule. The grid is sized to be resident at once (CTAs of up to 16 warps, blockIdx.y the batch
// index) and every group streams an even, contiguous share of its batch's tiles: the per-warp
// cp.async ring runs on across tile boundaries, so a warp's loads stay in flight from its first
// segment to its last instead of draining and refilling once per tile. Measured against one tile
// per CTA: +2-4 points of copy bandwidth at (4096, 7168, 8) and for bf16 B at 2^28 weights, no
// change on the short seed shape (7168, 2048, 4), which is bound by instruction issue instead
// (docs/performance.md).
// B never changes within a CTA, so the CTA's threads stage the B operand registers once, in shared
// memory, in exactly the order the lanes read them (plus a zero run for lanes whose column is not
// the active one). In the build for one CTA per SM (gemv_mma_kernel_one_cta_per_sm), bf16 B is
// staged times 2^70 where its batch's values allow it, so that A's decoded bits (values times
// 2^-126) feed the MMAs without the decoder's multiply (kBf16BStagingExponent); that build holds
// both loops and each CTA runs one (the shifted one only where the launcher allows it:
// MmaSchedule::shift_bf16_b). After each segment
// the partials a lane holds (four blocks of NVFP4, two of MXFP4) are scaled in fp32 (block scale
// times B's block scale, NaN propagating) and added to its row's sum; at the end of a tile the
// lanes and the group's warps combine them in a fixed order, so results are bitwise reproducible.
// K % 256 == 128: the last segment's range 1 re-reads range 0's bytes against B values of zero, so
// it adds exact zeros (or the NaN range 0 already has).
#pragma once

#include <cstdint>
#include <type_traits>

#include "../common/block_formats.h"
#include "element_types.cuh"
#include "gemv_kernels.cuh"
#include "mma_fragments.cuh"

namespace fp4ops::cuda {

constexpr int kMmaTileRows = 8;
constexpr int kRangeElems = 128;                  // per row: 4 lanes x 32 elements; K's granularity
constexpr int kSegmentElems = 2 * kRangeElems;    // per row and warp step
constexpr int kMmaMaxWarps = 8;          // per tile (warps_k)
constexpr int kMmaMaxWarpsPerCta = 16;   // groups of warps_k warps, sharing B's staged operands
constexpr int kMmaStages = 4;  // A ring depth per warp: 3 segments (3 KB) in flight

template <class Format, typename BT>
struct MmaGemvLayout {
  static constexpr bool kFp4B = std::is_same_v<BT, uint8_t>;
  static constexpr bool kNvfp4 = std::is_same_v<Format, Nvfp4Format>;
  static constexpr int kBlocksPerRange = kRangeElems / Format::kBlock;  // 8 or 4
  static constexpr int kBlocksPerSegment = 2 * kBlocksPerRange;
  // The MMA's element type: FP4 B is widened to fp16 like A (E2M1 values are exact in fp16).
  using MmaT = std::conditional_t<kFp4B, __half, BT>;
  // One slot = the B operand registers for one lane's 32 elements of one range: 16 fp16/bf16
  // pairs. Slots follow B's element order: [segment][range][t].
  static constexpr int kSlotBytes = 64;
  static constexpr int kSlotsPerSegment = kSegmentElems / 32;
  // One A stage = one segment of the tile: per range, 8 rows x 64 bytes of codes; then per range,
  // 8 rows of scales. Stage positions are "rows" 0..15: row g of range 0 is position g, of range 1
  // position g + 8 (the MMA row it feeds).
  static constexpr int kStageCodeBytes = 2 * kMmaTileRows * kRangeElems / 2;
  static constexpr int kStageBytes = kStageCodeBytes + 2 * kMmaTileRows * kBlocksPerRange;
  // Power of two the decoded operands carry (A's and, for FP4 B, B's): undone in fp32.
  static constexpr int kDecodeExponent = (kFp4B ? 2 : 1) * DenseOperand<MmaT>::kDecodeExponent;
  // Zero run that inactive lanes read as their B operand: 64 bytes, at 32 mod 128 from the slots so
  // it shares no bank with the active lanes' slots in one 16-byte load.
  static constexpr int kZeroRunBytes = 128;

  // Shared memory, in order: per warp an A ring of kMmaStages stages; B slots; FP4 B's block
  // scales [segment][block] (fp32 bits or E8M0 codes); the zero run; per warp two sets (by tile
  // parity) of 8 row partials.
  static constexpr size_t ring_bytes(int warps) { return static_cast<size_t>(warps) * kMmaStages * kStageBytes; }
  static constexpr size_t slots_bytes(int64_t segments) { return static_cast<size_t>(segments) * kSlotsPerSegment * kSlotBytes; }
  static constexpr size_t scales_bytes(int64_t segments) {
    return kFp4B ? static_cast<size_t>(segments) * kBlocksPerSegment * sizeof(uint32_t) : 0;
  }
  static constexpr size_t smem_bytes(int64_t segments, int warps) {
    return ring_bytes(warps) + slots_bytes(segments) + scales_bytes(segments) + kZeroRunBytes +
           static_cast<size_t>(warps) * 2 * kMmaTileRows * sizeof(float);
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

// bf16 B times 2^70, where A is fed to the MMAs as the decoder's raw bits (values times 2^-126:
// e2m1x8_to_bf16_bits), saves the decoder's bf16 multiply (4 of 17 instructions per word). The
// shift is exact and keeps every product normal for 2^-62 <= |b| < 2^57: a product is at least
// 2^-127 * 2^8 (the smallest A times the smallest staged B) and a multiple of 2^-126, so no
// product or partial sum is subnormal, and the MMA's sums are the unshifted ones times 2^-56
// exactly (the same operations, every exponent moved by -56), which the fp32 block scaling undoes:
// the results are bitwise those of the decode with the multiply. Zeros, infinities and NaNs
// pass as they are; a batch with any other value (subnormals included) outside that range is
// staged unshifted and takes the decode with the multiply.
constexpr int kBf16BStagingExponent = 70;

// One register of two bf16 values times 2^kBf16BStagingExponent; clears *in_range where a value
// is outside the range above.
__device__ __forceinline__ uint32_t bf16x2_shifted_for_raw_a(uint32_t pair, bool* in_range) {
  constexpr uint32_t kLowest = 127 - 62, kPastHighest = 127 + 57;  // biased exponents
  uint32_t out = 0;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    uint32_t h = pair >> (16 * half) & 0xFFFFu;
    const uint32_t exponent = h >> 7 & 0xFFu;
    if (exponent >= kLowest && exponent < kPastHighest) {
      h += static_cast<uint32_t>(kBf16BStagingExponent) << 7;
    } else if (exponent != 0xFFu && (h & 0x7FFFu) != 0) {
      *in_range = false;
    }
    out |= h << (16 * half);
  }
  return out;
}

// Writes B's slots (and FP4 B's block scales) for `segments` segments of batch l, all the CTA's
// threads taking 32-element chunks in turn; chunks and blocks past K are zeros. kShifted (bf16 B
// only): values times 2^kBf16BStagingExponent; returns false if this thread met a value that
// cannot be shifted (bf16x2_shifted_for_raw_a), true otherwise.
template <class Format, typename BT, bool kShifted = false>
__device__ __forceinline__ bool stage_b(const GemvArgs& args, int64_t l, int segments, uint8_t* slots, uint32_t* b_scales) {
  using Layout = MmaGemvLayout<Format, BT>;
  static_assert(!kShifted || std::is_same_v<BT, __nv_bfloat16>);
  bool in_range = true;
  const int chunks = segments * Layout::kSlotsPerSegment;
  for (int chunk = threadIdx.x; chunk < chunks; chunk += blockDim.x) {
    const int64_t element0 = static_cast<int64_t>(chunk) * 32;
    uint4* slot = reinterpret_cast<uint4*>(slots + static_cast<int64_t>(chunk) * Layout::kSlotBytes);
    if (element0 >= args.k) {
#pragma unroll
      for (int j = 0; j < 4; ++j) slot[j] = make_uint4(0u, 0u, 0u, 0u);
    } else if constexpr (Layout::kFp4B) {
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
          if constexpr (kShifted) regs[r] = bf16x2_shifted_for_raw_a(regs[r], &in_range);
        }
        slot[j] = make_uint4(regs[0], regs[1], regs[2], regs[3]);
      }
    }
  }
  if constexpr (Layout::kFp4B) {
    const int64_t k_blocks = args.k / Format::kBlock;
    const uint8_t* sb = args.b_scales + l * k_blocks;
    for (int i = threadIdx.x; i < segments * Layout::kBlocksPerSegment; i += blockDim.x) {
      if (i >= k_blocks) {
        b_scales[i] = 0u;  // +0.0f, or the E8M0 code 0 (2^-127): finite, against B values of zero
      } else if constexpr (Layout::kNvfp4) {
        // fp32 bits of the E4M3 scale times 2^-kDecodeExponent, which undoes both operands'
        // decode factors (exact: at most 448 * 2^12).
        b_scales[i] = float_to_bits(mul_rn(e4m3_decode(__ldg(sb + i)), exp2_int(-Layout::kDecodeExponent)));
      } else {
        b_scales[i] = __ldg(sb + i);  // the E8M0 code: combined with A's as an exponent sum
      }
    }
  }
  return in_range;
}

// Named barrier over one group's warps (ids 1..15; 0 is __syncthreads).
__device__ __forceinline__ void group_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(threads) : "memory");
}

// How a batch's 8-row tiles are shared: CTA b (of gridDim.x per batch) takes the contiguous tiles
// [b * tiles_per_cta + min(b, extra), ...), the first `extra` CTAs one tile more than the others,
// and its groups split those evenly in turn (again contiguous, the first ones one tile more). Each
// SM's load is then within one tile of the mean. Numbering the groups CTA by CTA in one even
// share instead put all the groups with a tile more into the first CTAs: (7168, 2048, 4) had 32
// tiles on 92 SMs and 16 on the other 40 (27.2 on average). Numbering them across the CTAs first
// balanced the SMs too but scattered each CTA's tiles over A, which cost 1-1.5 points of copy
// bandwidth at 16384^2 (H100, docs/performance.md). The launcher divides by the CTA count, so the
// kernel does not (a 64-bit division is ~70 instructions, a visible share of a warp's fixed cost
// on short rows); the 32-bit split among a CTA's groups is cheap.
struct MmaSchedule {
  int warps_k;            // warps per tile (depends on M and K only: it fixes the summation order)
  int64_t tiles_per_cta;  // tiles / gridDim.x
  int64_t extra;          // tiles % gridDim.x
  bool shift_bf16_b;      // the one-CTA build's shifted bf16-B path may run (the launcher's rule)

  // Tiles [*begin, *end) of group `group` (of `groups`) in CTA `cta`.
  __device__ __forceinline__ void group_tiles(int64_t cta, int group, int groups, int64_t* begin, int64_t* end) const {
    const int64_t cta_begin = cta * tiles_per_cta + (cta < extra ? cta : extra);
    const int cta_tiles = static_cast<int>(tiles_per_cta) + (cta < extra ? 1 : 0);
    const int per_group = cta_tiles / groups, more = cta_tiles % groups;
    *begin = cta_begin + static_cast<int64_t>(group) * per_group + (group < more ? group : more);
    *end = *begin + per_group + (group < more ? 1 : 0);
  }
};

// The ring offset after `offset`: stages of kStageBytes, wrapping after kMmaStages.
template <int kStageBytes>
__device__ __forceinline__ uint32_t next_stage_offset(uint32_t offset) {
  return offset == (kMmaStages - 1) * kStageBytes ? 0 : offset + kStageBytes;
}

// The kernel's body, built twice (the two kernels at the end of this file).
template <class Format, typename BT, typename OutT, bool kOneCtaPerSm>
__device__ __forceinline__ void gemv_mma(const GemvArgs& args, OutT* __restrict__ out, const MmaSchedule& schedule) {
  using Layout = MmaGemvLayout<Format, BT>;
  constexpr int kRangeBlocks = Layout::kBlocksPerRange, kSegmentBlocks = Layout::kBlocksPerSegment;
  extern __shared__ __align__(16) uint8_t smem[];

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const int warps_k = schedule.warps_k;
  const int group = warp / warps_k, kw = warp % warps_k;  // this warp's group and turn along K
  const int g = lane / 4, t = lane % 4;
  const int64_t l = blockIdx.y;
  const int segments = static_cast<int>((args.k + kSegmentElems - 1) / kSegmentElems);
  // Warp kw takes segments kw, kw + warps_k, ... of each tile: at any moment a group's warps read
  // adjacent segments of each row, i.e. contiguous runs of DRAM, and adjacent scale bytes.
  const int count = (segments - kw + warps_k - 1) / warps_k;
  // K % 256 == 128: the turn at which this warp reads the last segment, whose range 1 is past K.
  const int half_turn = args.k % kSegmentElems != 0 && kw == (segments - 1) % warps_k ? count - 1 : -1;

  // This group's tiles of batch l: an even, contiguous share (MmaSchedule).
  int64_t tile_begin, tile_end;
  schedule.group_tiles(blockIdx.x, group, warps / warps_k, &tile_begin, &tile_end);
  const int units = static_cast<int>(tile_end - tile_begin) * count;  // this warp's segments in all

  uint8_t* ring = smem + static_cast<size_t>(warp) * kMmaStages * Layout::kStageBytes;
  uint8_t* slots = smem + Layout::ring_bytes(warps);
  uint32_t* b_scales = reinterpret_cast<uint32_t*>(slots + Layout::slots_bytes(segments));
  uint8_t* zero_region = slots + Layout::slots_bytes(segments) + Layout::scales_bytes(segments);
  float* row_partials = reinterpret_cast<float*>(zero_region + Layout::kZeroRunBytes);  // [warp][2][8]

  // Rows past M (last tile of a batch) read row M - 1 and are never stored.
  const int64_t last_row = args.m - 1, k_bytes = args.k / 2, k_blocks = args.k / Format::kBlock;
  const auto row_address = [&](int64_t tile, int r) {
    const int64_t row = tile * kMmaTileRows + r;
    return l * args.m + (row < last_row ? row : last_row);
  };

  // Segment i of this warp -> stage i % kMmaStages: lane (g, t) copies its 16 bytes of row g in
  // each range; lanes 0..15 copy the scale bytes of one row's range each (stage position = lane).
  // One commit group per segment (empty past the end, so the wait count below stays uniform). The
  // sources advance by one turn per segment and jump to the next tile's rows after the tile's last
  // one; the destination offset cycles through the ring.
  const int scale_row = lane % kMmaTileRows, scale_range = lane / kMmaTileRows % 2;
  const uint8_t *next_codes, *next_scales;
  const auto point_at_tile = [&](int64_t tile) {
    next_codes = args.a_data + row_address(tile, g) * k_bytes + 16 * t + kw * (kSegmentElems / 2);
    next_scales = args.a_scales + row_address(tile, scale_row) * k_blocks + kw * kSegmentBlocks + scale_range * kRangeBlocks;
  };
  point_at_tile(tile_begin);
  const uint32_t ring_codes = shared_address(ring) + g * 64 + 16 * t;  // range 0; range 1 is 8 * 64 on
  const uint32_t ring_scales = shared_address(ring) + Layout::kStageCodeBytes + lane * kRangeBlocks;
  const int64_t code_step = kSegmentElems / 2 * warps_k, scale_step = kSegmentBlocks * warps_k;
  uint32_t issue_offset = 0;  // (issued % kMmaStages) * kStageBytes
  int issued = 0, issue_turn = 0;
  int64_t issue_tile = tile_begin;
  const auto issue = [&]() {
    if (issued < units) {
      // In the half segment range 1 re-reads range 0 (B is zero there): never past the row.
      const bool half = issue_turn == half_turn;
      cp_async_16_streaming(ring_codes + issue_offset, next_codes);
      cp_async_16_streaming(ring_codes + issue_offset + 8 * 64, next_codes + (half ? 0 : kRangeElems / 2));
      if (lane < 2 * kMmaTileRows) {
        cp_async_small<kRangeBlocks>(ring_scales + issue_offset, next_scales - (half ? scale_range * kRangeBlocks : 0));
      }
      if (++issue_turn == count) {
        issue_turn = 0;
        point_at_tile(++issue_tile);
      } else {
        next_codes += code_step, next_scales += scale_step;
      }
    }
    cp_async_commit();
    issue_offset = next_stage_offset<Layout::kStageBytes>(issue_offset);
    ++issued;
  };
#pragma unroll
  for (int i = 0; i < kMmaStages - 1; ++i) issue();

  // B's operands are staged by all the CTA's threads while the first A segments are on their way.
  // bf16 B is staged shifted for the raw-bits decode of A when the whole batch allows it (every
  // CTA of a batch decides the same), and staged again unshifted otherwise. Only with the
  // registers of one CTA per SM: under the 64 of two CTAs ptxas needs 78 for the two loops, and a
  // build with the shifted loop alone measured the same as the plain one (docs/performance.md).
  // The launcher allows the shifted path per GPU (schedule.shift_bf16_b): on the H100 the one-CTA
  // build's old loop is the faster one.
  constexpr bool kMayShiftB = kOneCtaPerSm && std::is_same_v<BT, __nv_bfloat16>;
  bool shifted_b = false;
  if constexpr (kMayShiftB) {
    if (schedule.shift_bf16_b) {
      shifted_b = !__syncthreads_or(!stage_b<Format, BT, true>(args, l, segments, slots, b_scales));
    }
  }
  if (!shifted_b) stage_b<Format, BT>(args, l, segments, slots, b_scales);
  if (threadIdx.x < Layout::kZeroRunBytes / 16) reinterpret_cast<uint4*>(zero_region)[threadIdx.x] = make_uint4(0u, 0u, 0u, 0u);
  __syncthreads();

  // Lane (g, t) supplies B column g: range g / 4's values for lane g % 4's k-slots, i.e. its own
  // slot when g % 4 == t and zeros otherwise. The zeros sit 32 bytes off the slots' 64-byte grid.
  const uint32_t slots_address = shared_address(slots), zero_address = shared_address(zero_region);
  const uint32_t zeros = zero_address + ((slots_address + 32 - zero_address) & 63u);
  const bool live = g % 4 == t;
  const uint32_t b_first = live ? slots_address + (kw * Layout::kSlotsPerSegment + g / 4 * 4 + t) * Layout::kSlotBytes : zeros;
  const uint32_t b_step = live ? warps_k * Layout::kSlotsPerSegment * Layout::kSlotBytes : 0;
  // The D elements lane (g, t) keeps: columns 2t, 2t + 1 of row g (range 0, lanes t < 2) or of row
  // g + 8 (range 1, lanes t >= 2): the segment's blocks [4t, 4t + 4) (NVFP4) or [2t, 2t + 2).
  constexpr int kPartials = kSegmentBlocks / 4;
  const bool upper = t >= 2;
  const uint32_t scale_offset = Layout::kStageCodeBytes + (g + 8 * (t / 2)) * kRangeBlocks + t % 2 * (kRangeBlocks / 2);
  const uint32_t b_scales_first = shared_address(b_scales) + (kw * kSegmentBlocks + t * kPartials) * sizeof(uint32_t);
  const uint32_t b_scales_step = warps_k * kSegmentBlocks * sizeof(uint32_t);
  uint32_t b_operand = b_first, b_scale = b_scales_first;

  float acc = 0.0f;
  const uint32_t ring_base = shared_address(ring);
  // shifted (std::bool_constant): B staged times 2^70 and A decoded to its raw bits (see
  // kBf16BStagingExponent), so the operands carry 2^(70 - 126) instead of Layout's power of two.
  const auto process_segment = [&](uint32_t stage_offset, auto shifted) {
    using MmaT = typename Layout::MmaT;
    constexpr bool kRawA = decltype(shifted)::value;
    constexpr int kDecodeExponent = kRawA ? kBf16BitsDecodeExponent + kBf16BStagingExponent : Layout::kDecodeExponent;
    const auto decode = [](uint32_t w) {
      if constexpr (kRawA) {
        return e2m1x8_to_bf16_bits(w);
      } else {
        return DenseOperand<MmaT>::decode(w);
      }
    };
    const uint32_t codes = ring_codes + stage_offset;
    const uint4 range0 = lds_128(codes), range1 = lds_128(codes + 8 * 64);
    const uint32_t words0[4] = {range0.x, range0.y, range0.z, range0.w};
    const uint32_t words1[4] = {range1.x, range1.y, range1.z, range1.w};
    // NVFP4: d[0] sums each lane's first block (words 0-1), d[1] its second (words 2-3). MXFP4's
    // one block per lane alternates between d[0] (words 0, 2) and d[1] (words 1, 3): in one
    // fragment its 8 MMAs would be a single dependent chain (measured: MXFP4 x bf16 +2 to +5
    // points of copy bandwidth with two; NVFP4 split into four chains was slower).
    float d[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint4 bw = lds_128(b_operand + j * 16);
      const Regs4 x = decode(words0[j]), y = decode(words1[j]);
      float(&dj)[4] = d[Layout::kNvfp4 ? j / 2 : j % 2];
      mma_m16n8k16<MmaT>(dj, {x.reg[0], y.reg[0], x.reg[1], y.reg[1]}, bw.x, bw.y);
      mma_m16n8k16<MmaT>(dj, {x.reg[2], y.reg[2], x.reg[3], y.reg[3]}, bw.z, bw.w);
    }
    // dk[i] = the partial sum of block kPartials * t + i; sa_codes its scale code.
    const auto kept = [&](int fragment, int column) { return upper ? d[fragment][2 + column] : d[fragment][column]; };
    // sa, sa_codes and sb are each read by some of the layouts only.
    float dk[kPartials];
    [[maybe_unused]] float sa[kPartials];
    [[maybe_unused]] uint32_t sa_codes[kPartials];
    const uint32_t stage_scales = ring_base + stage_offset + scale_offset;
    if constexpr (Layout::kNvfp4) {
      dk[0] = kept(0, 0), dk[1] = kept(1, 0), dk[2] = kept(0, 1), dk[3] = kept(1, 1);
      const uint32_t scales = lds_u32(stage_scales);
      const float2 s01 = e4m3x2_to_float2(scales & 0xFFFFu), s23 = e4m3x2_to_float2(scales >> 16);
      sa[0] = s01.x, sa[1] = s01.y, sa[2] = s23.x, sa[3] = s23.y;
    } else {
      dk[0] = __fadd_rn(kept(0, 0), kept(1, 0)), dk[1] = __fadd_rn(kept(0, 1), kept(1, 1));
      const uint32_t scales = lds_u16(stage_scales);
      sa_codes[0] = scales & 0xFFu, sa_codes[1] = scales >> 8;
      if constexpr (!Layout::kFp4B) sa[0] = e8m0_decode(sa_codes[0]), sa[1] = e8m0_decode(sa_codes[1]);
    }
    // B's block scales for FP4 B: fp32 bits times 2^-kDecodeExponent, or E8M0 codes.
    [[maybe_unused]] uint32_t sb[kPartials];
    if constexpr (Layout::kFp4B && Layout::kNvfp4) {
      const uint4 v = lds_128(b_scale);
      sb[0] = v.x, sb[1] = v.y, sb[2] = v.z, sb[3] = v.w;
    } else if constexpr (Layout::kFp4B) {
      sb[0] = lds_u32(b_scale), sb[1] = lds_u32(b_scale + sizeof(uint32_t));
    }
    // Undo the operands' power of two (exact: D and the NVFP4 scales are far from the fp32 limits).
    const auto undo = [](float v) { return kDecodeExponent == 0 ? v : mul_rn(v, exp2_int(-kDecodeExponent)); };
#pragma unroll
    for (int i = 0; i < kPartials; ++i) {
      float partial;
      if constexpr (Layout::kFp4B && Layout::kNvfp4) {
        partial = mul_rn(mul_rn(dk[i], sa[i]), bits_to_float(sb[i]));
      } else if constexpr (Layout::kFp4B) {
        partial = scale_by_e8m0_pair(dk[i], sa_codes[i], sb[i], -kDecodeExponent);
      } else if constexpr (Layout::kNvfp4) {
        partial = mul_rn(dk[i], undo(sa[i]));  // sa * 2^-kDecodeExponent <= 448 * 2^56
      } else {
        partial = mul_rn(undo(dk[i]), sa[i]);
      }
      acc = __fadd_rn(acc, partial);
    }
  };

  // The global scales, read once (a missing one is 1: multiplying by it is exact).
  const float a_global = args.a_global != nullptr ? *args.a_global : 1.0f;
  const float b_global = args.b_global != nullptr ? *args.b_global : 1.0f;
  const auto store_row = [&](int64_t row, float y) {
    if (row >= args.m) return;
    out[l * args.m + row] = from_float<OutT>(mul_rn(mul_rn(y, a_global), b_global));
  };
  // End of a tile: the lanes t of a quad hold row g's sums over different blocks: a fixed
  // butterfly, then one partial per warp and row, summed over the group's warps in order (the
  // partials alternate between two buffers by tile parity, so one barrier per tile suffices:
  // a buffer is rewritten only after the next tile's barrier, which its reader has passed).
  const auto finish_tile = [&](int64_t tile, int parity) {
#pragma unroll
    for (int offset = 1; offset < 4; offset *= 2) acc = __fadd_rn(acc, __shfl_xor_sync(0xFFFFFFFFu, acc, offset));
    const int64_t row0 = tile * kMmaTileRows;
    if (warps_k == 1) {
      if (t == 0) store_row(row0 + g, acc);
    } else {
      float* mine = row_partials + (warp * 2 + parity) * kMmaTileRows;
      if (t == 0) mine[g] = acc;
      group_barrier(1 + group, warps_k * 32);
      if (kw == 0 && lane < kMmaTileRows) {
        float y = mine[lane];
        for (int w = 1; w < warps_k; ++w) y = __fadd_rn(y, mine[w * 2 * kMmaTileRows + lane]);
        store_row(row0 + lane, y);
      }
    }
    acc = 0.0f;
  };

  const auto stream_segments = [&](auto shifted) {
    int turn = 0, parity = 0;
    int64_t tile = tile_begin;
    uint32_t stage_offset = 0;
    for (int i = 0; i < units; ++i) {
      cp_async_wait<kMmaStages - 2>();  // this lane's copies of segment i have landed ...
      __syncwarp();                      // ... and every lane's (scale rows); stage (i - 1) is free
      issue();  // segment i + kMmaStages - 1
      process_segment(stage_offset, shifted);
      stage_offset = next_stage_offset<Layout::kStageBytes>(stage_offset);
      b_operand += b_step, b_scale += b_scales_step;
      if (++turn == count) {
        finish_tile(tile++, parity);
        turn = 0, parity ^= 1;
        b_operand = b_first, b_scale = b_scales_first;
      }
    }
  };
  if (shifted_b) {
    if constexpr (kMayShiftB) stream_segments(std::true_type{});
  } else {
    stream_segments(std::false_type{});
  }
}

// The two builds of the kernel, alike but for the register budget ptxas gets (and the shifted bf16
// B path, which needs the registers). gemv_mma_kernel: ptxas's own choice, 62-64 registers, so two
// 16-warp CTAs fit on an SM. gemv_mma_kernel_one_cta_per_sm: up to 128 (ptxas takes 79-92), one
// such CTA per SM. Which is faster depends on the GPU and the work (gemv.cu, the launcher).
template <class Format, typename BT, typename OutT>
__global__ void __launch_bounds__(kMmaMaxWarpsPerCta * 32)
    gemv_mma_kernel(GemvArgs args, OutT* __restrict__ out, MmaSchedule schedule) {
  gemv_mma<Format, BT, OutT, false>(args, out, schedule);
}

template <class Format, typename BT, typename OutT>
__global__ void __launch_bounds__(kMmaMaxWarpsPerCta * 32, 1)
    gemv_mma_kernel_one_cta_per_sm(GemvArgs args, OutT* __restrict__ out, MmaSchedule schedule) {
  gemv_mma<Format, BT, OutT, true>(args, out, schedule);
}

}  // namespace fp4ops::cuda
