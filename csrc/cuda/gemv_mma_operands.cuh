// The tensor-core GEMV's operands (gemv_mma.cuh): tile and segment geometry, the shared-memory
// layout, and B staged once per CTA as MMA operand registers.
//
// Geometry. A tile is 8 rows of A; a segment is 256 elements of each row, as two ranges of 128. In
// a segment, lane (g, t) (g = lane / 4, t = lane % 4) holds 16 bytes of row g in each range:
// elements [32t, 32t + 32) of range 0 feed MMA row g, those of range 1 MMA row g + 8. Lane t's
// 32 elements are one MXFP4 block or two NVFP4 blocks.
// B operand. An MMA sums over the k-slots of all four lanes t, so it mixes four lanes' elements
// and two ranges. B's eight columns keep them apart: column n < 4 holds range 0's B values only in
// the k-slots of lane n, column 4 + n range 1's in lane n's (zeros elsewhere), so D[r, n] with r
// and n in the same range is the exact sum over one lane's elements of that range (the other half
// of D is discarded). B never changes within a CTA, so the CTA stages these registers once, in
// shared memory, in exactly the order the lanes read them ("slots"), plus a zero run that the
// lanes whose column is inactive read instead.
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

template <class FormatT, typename BT>
struct MmaGemvLayout {
  using Format = FormatT;
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

#if defined(FP4OPS_HW_E4M3)
// Two E4M3 codes (low byte first) -> fp16, exactly (every E4M3 value is an fp16 one; NaN stays
// NaN), by the E4M3 cvt (FP4OPS_HW_E4M3, arch.h).
__device__ __forceinline__ __half2 e4m3x2_to_half2(uint32_t codes) {
  uint32_t halves;
  asm("{\n\t.reg .b16 pair;\n\t"
      "cvt.u16.u32 pair, %1;\n\t"
      "cvt.rn.f16x2.e4m3x2 %0, pair;\n\t}"
      : "=r"(halves)
      : "r"(codes));
  return *reinterpret_cast<const __half2*>(&halves);
}
#endif

// Two E4M3 codes (low byte first) -> fp32, exactly (NaN stays NaN): with the E4M3 cvt where the
// chip has it, else the format's software decode (same values).
__device__ __forceinline__ float2 e4m3x2_to_float2(uint32_t codes) {
#if defined(FP4OPS_HW_E4M3)
  return __half22float2(e4m3x2_to_half2(codes));
#else
  return make_float2(e4m3_decode(codes & 0xFFu), e4m3_decode(codes >> 8 & 0xFFu));
#endif
}

// bf16 B times 2^70, where A is fed to the MMAs as the decoder's raw bits (values times 2^-126:
// e2m1x8_to_bf16_bits), saves the decoder's bf16 multiply per word of A. The
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

}  // namespace fp4ops::cuda
