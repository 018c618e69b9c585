// Tensor-core FP4 linear for up to 64 rows of x: y[m, n] = sum_k x[m, k] W[n, k] (fp4ops.linear).
//
// The weight is the MMA's A operand (m16n8k16: 16 output features), decoded in registers; the
// rows of x (tokens) are its B operand, 8 per MMA column tile (kNt tiles: 8 * kNt rows per CTA).
// Each warp owns 16 features; a CTA's warps share one copy of x in shared memory. K is split into
// `splits` contiguous ranges (a function of N and K only: linear_splits in linear.cu), one per
// blockIdx.y; with more than one, each range's sums go to an fp32 workspace that
// linear_reduce_kernel adds in range order.
//
// Why the results are batch-invariant (row m's output does not depend on how many other rows
// there are, nor on their values): an MMA's column n is computed from column n of B alone, every
// row of x goes through the same operations whichever column it lands in, and the summation
// order (the K ranges, k ascending within one, ranges in order) depends on N and K only.
//
// Per pipeline step (128 elements of K) each warp streams its 16 rows of codes, and the CTA the
// step's slice of x, through a ring of kLinearStages stages (cp.async; one commit group per step; a
// CTA barrier per step, since the warps share x); the warp's block scales go through a ring of
// their own, in the same commit groups (LinearScaleRing). With at most 32 rows of dense
// x whose K range fits (resident x, linear.cu), the CTA instead stages its whole range of x once,
// and each warp's ring holds only its own rows: no CTA barrier per step, no x copies per step.
// Both read the same B values in the same order, so they give the same bits. Codes reach the lanes through
// ldmatrix: lane (g, t) gets 32-bit word t (elements 8t .. 8t + 7) of each 32-element unit of
// rows g and g + 8. Which element sits in which k-slot does not matter to a dot product as long
// as B has the same order: B is read as the same 8 elements of each row of x and permuted into
// the decoder's pairing (mma_fragments.cuh).
//
// Scaling. NVFP4: each decoded element is multiplied (fp16/bf16, exact) by its block scale times
// a power of two, so the MMAs accumulate the whole range directly: E2M1 x E4M3 has at most 5
// significant bits and lies in [2^-10, 2688], exact in both types (LinearScaling). MXFP4 likewise,
// by 2^(E - 127) times a power of two, in every block whose scale lies in the type's window
// for it (Mxfp4Prescaling); a block outside it adds zeros there, and its sum is added after the
// main loop (linear_mxfp4_outside_pass). FP4 x is decoded once per call into dense x: NVFP4 x
// prescaled like W into fp16, MXFP4 x into its exact bf16 values (linear_decode_x_kernel), which
// then run as any dense bf16 x.
#pragma once

#include <cstdint>
#include <type_traits>

#include "../common/block_formats.h"
#include "async_copy.cuh"
#include "element_types.cuh"
#include "gemv_mma_operands.cuh"
#include "grid_dependency.cuh"
#include "mma_fragments.cuh"

namespace fp4ops::cuda {

constexpr int kLinearStepElems = 128;  // K per pipeline step: 4 units of 32 elements per row
constexpr int kLinearTileRows = 16;    // weight rows per warp: the MMA's M
constexpr int kLinearStages = 4;       // ring depth: 3 steps in flight
constexpr int kLinearMaxTokens = 64;   // rows of x per CTA (8 column tiles)
constexpr int kLinearWgmmaMaxTokens = 128;  // on the warpgroup MMA (linear_wgmma.cuh: 16 column tiles)

enum class LinearBias : int { kNone = 0, kFloat = 1, kHalf = 2, kBFloat16 = 3 };
enum class LinearOut : int { kFloat = 0, kHalf = 1, kBFloat16 = 2 };

struct LinearArgs {
  const uint8_t* w_data;    // [N, K/2]
  const uint8_t* w_scales;  // [N, K/block], linear
  const float* w_global;    // NVFP4 global scale of W, or nullptr (1)
  const void* x;            // [M, K] fp16/bf16 (FP4 x: uint8 [M, K/2] until decoded, linear.cu)
  const uint8_t* x_scales;  // [M, K/block] for FP4 x until decoded, else nullptr
  const float* x_global;    // NVFP4 global scale of FP4 x, or nullptr (1)
  bool x_prescaled;         // dense x decoded from NVFP4 x (PrescaledNvfp4XChunk), carrying 2^kExponent like W
  bool x_paired;            // dense x is in the decoders' pairing already (resident x: not paired again)
  const void* bias;         // [N] or nullptr
  LinearBias bias_type;
  int64_t m, n, k;
  int64_t steps;            // K / kLinearStepElems
  int splits;               // K ranges (gridDim.y)
  float* partials;          // [splits, M, N] when splits > 1
  void* out;                // [M, N]
  LinearOut out_type;
  int prefetch_steps;       // steps of each warp's weight range brought to L2 before the grid dependency wait
  int range_steps;          // the longest K range, in steps (resident x: its rows' stride, 256 bytes a step)
  int live_tokens;          // resident x in one row chunk: rows of x staged (M)
  bool w_scale_windows;     // W's scale rows are a multiple of 32 bytes (LinearScaleRing's windows)
};

// The power of two NVFP4 prescaling leaves on the decoded operands: the decoder's (values x
// 2^kDecodeExponent) plus the factor's (block scale x 2^kFactorExponent). Chosen per decoder so
// that the factor and every scaled element are exact, normal fp16/bf16 values:
// - fp16 from E4M3 bytes (x 2^-6): factor s x 2^6 <= 28672; elements e2m1 x s, exponent 0.
// - fp16 from bit placement (x 2^-14, no E4M3 cvt): factor s x 2^7 <= 57344; elements in
//   [2^-17, 21], exponent -7.
// - fp16 from the hardware E2M1 cvt (exact values): factor s; exponent 0.
// - bf16 raw bits (x 2^-126): factor s x 2^118 < 2^127; elements in [2^-18, 10.5], exponent -8.
template <typename MmaT>
struct LinearScaling;
template <>
struct LinearScaling<__half> {
  static constexpr int kDecodeExponent = DenseOperand<__half>::kDecodeExponent;
  static constexpr int kFactorExponent = kDecodeExponent == kFp16BitsDecodeExponent ? 7 : -kDecodeExponent;
  static constexpr int kExponent = kDecodeExponent + kFactorExponent;
  static constexpr Pairing kPairing = DenseOperand<__half>::kPairing;
  static __device__ __forceinline__ Regs4 decode(uint32_t w) { return e2m1x8_to_fp16(w); }
  static __device__ __forceinline__ uint32_t factor(float scale) {
    const __half2 f = __float2half2_rn(mul_rn(scale, exp2_int(kFactorExponent)));
    return *reinterpret_cast<const uint32_t*>(&f);
  }
  // The factors of two E4M3 codes (low byte first), one a half. With the E4M3 cvt the scales
  // widen to fp16 exactly and one fp16 multiply by the power of two gives the factors (exact: see
  // above), where the widening to fp32, the fp32 multiply and the narrowing cost three times the
  // instructions; without it, as factor() does.
  static __device__ __forceinline__ uint32_t factor_pair(uint32_t codes) {
#if defined(FP4OPS_HW_E4M3)
    __half2 f = e4m3x2_to_half2(codes);
    if constexpr (kFactorExponent != 0) f = __hmul2(f, __float2half2_rn(exp2_int(kFactorExponent)));
#else
    const float2 scales = e4m3x2_to_float2(codes);
    const __half2 f = __floats2half2_rn(mul_rn(scales.x, exp2_int(kFactorExponent)), mul_rn(scales.y, exp2_int(kFactorExponent)));
#endif
    return *reinterpret_cast<const uint32_t*>(&f);
  }
  // a's two values times the factor in half `half` of `factors`.
  static __device__ __forceinline__ uint32_t mul(uint32_t a, uint32_t factors, int half = 0) {
    const __half2 f = *reinterpret_cast<const __half2*>(&factors);
    const __half2 v = __hmul2(*reinterpret_cast<const __half2*>(&a), half == 0 ? __low2half2(f) : __high2half2(f));
    return *reinterpret_cast<const uint32_t*>(&v);
  }
};
template <>
struct LinearScaling<__nv_bfloat16> {
  static constexpr int kDecodeExponent = kBf16BitsDecodeExponent;
  static constexpr int kFactorExponent = 118;
  static constexpr int kExponent = kDecodeExponent + kFactorExponent;
  static constexpr Pairing kPairing = Pairing::kPlus4;
  static __device__ __forceinline__ Regs4 decode(uint32_t w) { return e2m1x8_to_bf16_bits(w); }
  static __device__ __forceinline__ uint32_t factor(float scale) {
    const __nv_bfloat162 f = __float2bfloat162_rn(mul_rn(scale, exp2_int(kFactorExponent)));
    return *reinterpret_cast<const uint32_t*>(&f);
  }
  // The factors of two E4M3 codes (low byte first), one a half: the scales narrowed to bf16 (exact:
  // four significant bits), then one bf16 multiply by the power of two (exact: the products are
  // normal and below bf16's largest), where two fp32 multiplies came before the narrowing.
  static __device__ __forceinline__ uint32_t factor_pair(uint32_t codes) {
    const float2 scales = e4m3x2_to_float2(codes);
    const __nv_bfloat162 f = __hmul2(__floats2bfloat162_rn(scales.x, scales.y), __float2bfloat162_rn(exp2_int(kFactorExponent)));
    return *reinterpret_cast<const uint32_t*>(&f);
  }
  // a's two values times the factor in half `half` of `factors`.
  static __device__ __forceinline__ uint32_t mul(uint32_t a, uint32_t factors, int half = 0) {
    const __nv_bfloat162 f = *reinterpret_cast<const __nv_bfloat162*>(&factors);
    const __nv_bfloat162 v =
        __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&a), half == 0 ? __low2bfloat162(f) : __high2bfloat162(f));
    return *reinterpret_cast<const uint32_t*>(&v);
  }
};

// MXFP4 weights prescaled like NVFP4's (an E8M0 scale is a power of two): the decoder's values
// (E2M1 value x 2^kDecodeExponent, LinearScaling) times the factor 2^(E - 127 + kCarriedExponent -
// kDecodeExponent) are the weight times 2^kCarriedExponent, exact for codes E in [kMinCode,
// kMaxCode]: there the factor is a normal number of MmaT (its exponent field is E + kFieldBias) and
// every product, of at most two significant bits, is a multiple of the type's smallest subnormal
// and at most its largest finite value.
// - bf16 (raw bits, x 2^-126): factor 2^(E - 6), field E + 121 <= 254: codes 0..133, products down
//   to 2^-133 (bf16's smallest subnormal); the sums carry 2^-5.
// - fp16: nothing carried; the factor's field E - 112 - kDecodeExponent in 1..30 and products in
//   [2^-24, 65504] (codes 104..140): codes 107..136 from the E4M3-byte decode (x 2^-6), 104..128
//   from bit placement (x 2^-14), 113..140 from the hardware conversion (exact values).
// A block with a code outside the window is added apart (linear_mxfp4_outside_pass).
template <typename MmaT>
struct Mxfp4Prescaling;
template <>
struct Mxfp4Prescaling<__nv_bfloat16> {
  static constexpr int kCarriedExponent = -5;
  static constexpr int kMinCode = 0, kMaxCode = 133;
  static constexpr int kFieldBias = 121, kFieldShift = 7;
};
template <>
struct Mxfp4Prescaling<__half> {
  static constexpr int kDecodeExponent = LinearScaling<__half>::kDecodeExponent;
  static constexpr int kCarriedExponent = 0;
  static constexpr int kMinCode = 113 + kDecodeExponent > 104 ? 113 + kDecodeExponent : 104;
  static constexpr int kMaxCode = 142 + kDecodeExponent < 140 ? 142 + kDecodeExponent : 140;
  static constexpr int kFieldBias = -112 - kDecodeExponent, kFieldShift = 10;
};

// Nonzero where a byte of `codes` lies outside [P::kMinCode, P::kMaxCode] (NaN's 255 included), a
// few instructions a word, no carry between bytes. From code 0 (bf16): a byte above kMaxCode = 128 +
// m - 1 has bit 7 set and low bits of at least m, which plus 128 - m carry into bit 7. Otherwise
// (a window of at most 128 codes): each byte moved by 127 - kMaxCode (mod 256) puts the window at
// [127 - w, 127] (w = kMaxCode - kMinCode), where bit 7 is clear and the low bits plus w + 1 carry.
template <class P>
__device__ __forceinline__ uint32_t mxfp4_codes_outside(uint32_t codes) {
  constexpr uint32_t kHigh = 0x80808080u, kLow = 0x7F7F7F7Fu, kOnes = 0x01010101u;
  if constexpr (P::kMinCode == 0) {
    static_assert(P::kMaxCode >= 128 && P::kMaxCode < 255);
    constexpr uint32_t m = P::kMaxCode + 1 - 128;
    return ((codes & kLow) + (128 - m) * kOnes) & codes & kHigh;
  } else {
    static_assert(P::kMaxCode - P::kMinCode < 128);
    constexpr uint32_t kMove = static_cast<uint32_t>(127 - P::kMaxCode) & 0xFFu;
    const uint32_t moved = ((codes & kLow) + (kMove & 0x7Fu) * kOnes) ^ ((codes ^ kMove * kOnes) & kHigh);
    return (((moved & kLow) + (P::kMaxCode - P::kMinCode + 1) * kOnes) & ~moved & kHigh) ^ kHigh;
  }
}

// Each warp's block scales, outside the stage ring: per weight row a ring of kRingBytes (8 NVFP4
// or 16 MXFP4 steps), rows kRingBytes apart, step s of row r at ((s % kRingSteps) * kStepBytes) ^
// swizzle(r) in it: the XOR moves the 16-byte chunks of rows 2i and 2i + 1 by i, so that the 8
// rows a step's read takes (rows g, then g + 8) lie in distinct banks, and keeps 16-byte copies
// whole. Where W's scale rows are a multiple of 32 bytes (LinearArgs::w_scale_windows), the scales
// arrive by windows: the 32 bytes of a row aligned in it (half a ring, kWindowSteps steps), one
// 16-byte `.cg` copy a lane (row l % 16, half l / 16) as the window's first step is issued, into
// the ring's halves in turn. Otherwise lanes 0-15 copy their row's step (cp_async_small) every
// step. Why: small copies go through L1, and a row's 32-byte sector is read again only 4 (NVFP4) or
// 8 (MXFP4) steps later, by which time its 128-byte line (one per row, 128 a CTA) may have been
// evicted where its SM's CTAs take most of the shared memory; each miss is another trip to L2. A
// window takes the sector once, past L1.
constexpr uint32_t kLinearScaleRowsBelow = 8 * 64;  // in a scale ring: from row r's step to row r + 8's (the same swizzle)
template <class Format>
struct LinearScaleRing {
  static constexpr uint32_t kStepBytes = kLinearStepElems / Format::kBlock;  // 8 or 4
  static constexpr uint32_t kWindowBytes = 32, kRingBytes = 2 * kWindowBytes;
  static constexpr int kWindowSteps = kWindowBytes / kStepBytes, kRingSteps = kRingBytes / kStepBytes;
  static constexpr uint32_t kWarpBytes = kLinearTileRows * kRingBytes;
  static_assert(kLinearScaleRowsBelow == 8 * kRingBytes);
  // Where step `step` sits in a row's ring before the swizzle.
  static __device__ __forceinline__ uint32_t position(int64_t step) { return static_cast<uint32_t>(step) % kRingSteps * kStepBytes; }
  // ... and the step after the one at `position`.
  static __device__ __forceinline__ uint32_t next(uint32_t position) { return (position + kStepBytes) % kRingBytes; }
  static __device__ __forceinline__ uint32_t swizzle(int row) { return (row >> 1 & 3) << 4; }
};

// Shared memory: kLinearStages stages, each [W codes: warp][16 rows][64 bytes] (16-byte units
// XOR-swizzled by row, so each ldmatrix phase hits 8 distinct bank groups), [x: token][one step]
// (256 bytes, units swizzled by the token's parity); then each warp's scale ring (LinearScaleRing).
template <class FormatT, typename XT, int kNt, bool kResident = false, bool kRowChunks = false>
struct LinearLayout {
  using Format = FormatT;
  using XType = XT;
  using MmaT = XT;
  static_assert(std::is_same_v<XT, __half> || std::is_same_v<XT, __nv_bfloat16>, "dense x (FP4 x is decoded first)");
  static constexpr bool kNvfp4 = std::is_same_v<Format, Nvfp4Format>;
  // The power of two that W's prescaling (see "Scaling" above) leaves on the sums, undone at the
  // store (linear_store_sums).
  static constexpr int kWCarriedExponent = kNvfp4 ? LinearScaling<MmaT>::kExponent : Mxfp4Prescaling<MmaT>::kCarriedExponent;
  static constexpr int kTokens = 8 * kNt;
  // Dense x staged per step arrives in the decoders' pairing (linear_permute_x_kernel) for more than
  // one column tile; with one, each warp pairs its B registers itself (fewer instructions than a
  // launch). Resident x is paired in place once staged unless it arrives paired (LinearArgs::x_paired).
  static constexpr bool kXPermuted = kNt > 1 && !kResident;
  // Resident x (dense x, at most 32 rows): the CTA stages its whole K range of x once, paired, after
  // the ring; the ring then carries only the weight, each warp waits for its own copies alone, and
  // the steps need no CTA barrier (linear_copy_resident_x).
  static constexpr bool kXResident = kResident;
  static_assert(!kResident || kNt <= 4, "resident x: at most 4 column tiles");
  // Resident x in more than one row chunk (gridDim.z > 1): each CTA stages its chunk's rows.
  static constexpr bool kResidentRowChunks = kRowChunks;
  static_assert(!kRowChunks || kResident, "row chunks of resident x");
  static constexpr int kWCodeBytes = kLinearTileRows * kLinearStepElems / 2;
  static constexpr int kXRowBytes = kLinearStepElems * 2;
  using ScaleRing = LinearScaleRing<Format>;
  static constexpr size_t x_offset(int warps) { return static_cast<size_t>(warps) * kWCodeBytes; }
  static constexpr size_t stage_bytes(int warps) { return x_offset(warps) + (kXResident ? 0 : kTokens * kXRowBytes); }
  static constexpr size_t scale_ring_offset(int warps) { return kLinearStages * stage_bytes(warps); }
  static constexpr size_t smem_bytes(int warps) { return scale_ring_offset(warps) + static_cast<size_t>(warps) * ScaleRing::kWarpBytes; }
  // Resident x, after the ring: `tokens` rows of `range_steps` steps of 256 bytes, then, where the
  // column tiles have rows past M, one zeroed row that their lanes read instead.
  static constexpr size_t resident_x_bytes(int tokens, int range_steps) {
    return kXResident ? static_cast<size_t>(tokens + (tokens < kTokens ? 1 : 0)) * range_steps * kLinearStepElems * 2 : 0;
  }
  static constexpr size_t resident_smem_bytes(int warps, int tokens, int range_steps) {
    return smem_bytes(warps) + resident_x_bytes(tokens, range_steps);
  }
};

// Byte offset of 16-byte unit `unit` (0..3) of weight row r (0..15) within a warp's stage codes.
__device__ __forceinline__ uint32_t w_unit_offset(int r, int unit) { return r * 64 + ((unit ^ (r >> 1 & 3)) << 4); }
// Byte offset of 16-byte chunk c (0..15) within one step of dense x token row `token`: the chunks
// of odd rows swap 64-byte halves, so that the eight lanes of an LDS.128 phase (rows g, g + 1;
// chunks 4u .. 4u + 3) hit distinct banks.
__device__ __forceinline__ uint32_t x_chunk_in_row(int token, int c) { return (c ^ (token & 1) << 2) << 4; }
// ... and of the same chunk with rows `stride` bytes apart (a multiple of 256).
__device__ __forceinline__ uint32_t x_chunk_offset(int token, int c, uint32_t stride = 256) {
  return token * stride + x_chunk_in_row(token, c);
}

// What one thread does in the CTA, fixed at the start.
struct LinearThread {
  int lane, warp, warps, g, t;
  int64_t row0;          // this warp's first weight row
  int64_t token0;        // the CTA's first row of x
  int64_t step_begin, step_end;  // this CTA's K range, in steps
};

// A lane's share of its warp's weight copies, step after step: two 16-byte units of codes into
// the stage, at fixed offsets within it (unit c of rows r and r + 8, lane l: r = l / 4, c = l % 4;
// the second 512 bytes after the first, the swizzle, w_unit_offset, being the same for both rows),
// and block scales into the warp's scale ring (LinearScaleRing): with windows, the lane's half of
// each window of row l % 16 as its first step is issued (and in the constructor the window holding
// the range's first step, where that is not a window's first); without, lanes 0-15 their row's
// step. Sources advance by what was copied. Rows past N read row N - 1 (never stored).
template <class Layout>
struct LinearWeightCopies {
  using ScaleRing = typename Layout::ScaleRing;
  static constexpr uint32_t kSecondRowsOffset = 8 * 64;
  const uint8_t* codes[2];
  const uint8_t* scales;   // windows: the lane's half of the next window; else its row's next step
  uint32_t codes_dst;
  uint32_t scales_dst;     // the lane's row's ring
  uint32_t scales_swizzle; // its row's swizzle, with windows XOR its half's 16 bytes (both in bits 4-5)
  uint32_t position;       // the next step's place in the ring (ScaleRing::position)

  __device__ __forceinline__ LinearWeightCopies(const LinearArgs& args, const LinearThread& th, uint32_t scale_ring) {
    using Format = typename Layout::Format;
    const int64_t k_bytes = args.k / 2, k_blocks = args.k / Format::kBlock;
    const int r = th.lane >> 2, c = th.lane & 3;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = th.row0 + r + 8 * h < args.n ? th.row0 + r + 8 * h : args.n - 1;
      codes[h] = args.w_data + row * k_bytes + th.step_begin * 64 + c * 16;
    }
    codes_dst = kept_in_register(th.warp * Layout::kWCodeBytes + w_unit_offset(r, c));
    const int scale_r = th.lane % kLinearTileRows, half = th.lane / kLinearTileRows;
    const int64_t row = th.row0 + scale_r < args.n ? th.row0 + scale_r : args.n - 1;
    scales_dst = kept_in_register(scale_ring + scale_r * ScaleRing::kRingBytes);
    scales_swizzle = kept_in_register(ScaleRing::swizzle(scale_r) ^ (args.w_scale_windows ? half * 16 : 0));
    position = ScaleRing::position(th.step_begin);
    if (args.w_scale_windows) {
      const int64_t window = th.step_begin * ScaleRing::kStepBytes / ScaleRing::kWindowBytes * ScaleRing::kWindowBytes;
      scales = args.w_scales + row * k_blocks + window + half * 16;
      if (position % ScaleRing::kWindowBytes != 0 && th.step_begin < th.step_end) issue_window();
    } else {
      scales = args.w_scales + row * k_blocks + th.step_begin * ScaleRing::kStepBytes;
    }
  }
  // The lane's half of the window holding the step at `position`, into its ring (the rows being a
  // multiple of the window, every window lies within its row). A plain `.cg` copy, without the L2
  // prefetch of 128 bytes that the codes' copies ask for: around a 32-byte window those are other
  // windows' scales, often another K range's, fetched ahead of their use, which slowed the
  // one-row calls of the shorter ranges (docs/performance.md).
  __device__ __forceinline__ void issue_window() {
    cp_async_16_or_zeros(scales_dst + ((position & ~(ScaleRing::kWindowBytes - 1)) ^ scales_swizzle), scales, true);
    scales += ScaleRing::kWindowBytes;
  }
  // Copies the next step: codes into the stage at `stage` (shared address), scales into the ring.
  __device__ __forceinline__ void issue_next(const LinearArgs& args, const LinearThread& th, uint32_t stage) {
    cp_async_16_streaming(stage + codes_dst, codes[0]);
    cp_async_16_streaming(stage + codes_dst + kSecondRowsOffset, codes[1]);
    codes[0] += 64, codes[1] += 64;
    if (args.w_scale_windows) {
      if (position % ScaleRing::kWindowBytes == 0) issue_window();
    } else {
      if (th.lane < kLinearTileRows) cp_async_small<ScaleRing::kStepBytes>(scales_dst + (position ^ scales_swizzle), scales);
      scales += ScaleRing::kStepBytes;
    }
    position = ScaleRing::next(position);
  }
};

// A thread's share of the CTA's copies of dense x in the per-step kernel, step after step: chunk
// tid % 16 of rows tid / 16 + h * rows_per_pass (rows_per_pass = threads / 16, a multiple of 8, so
// all of a thread's rows share a parity and with it the chunk's place, x_chunk_offset). Rows past M
// are zero-filled (from a valid address). Sources advance by a step's 256 bytes.
template <class Layout>
struct LinearDenseXCopies {
  static constexpr int kMaxPasses = Layout::kTokens * 16 / 128;  // CTAs have at least 4 warps
  const uint8_t* src;    // this step's chunk of the thread's first row (of row M - 1 where that is past M)
  int64_t row_bytes;     // from one pass's row to the next's
  uint32_t dst, pass_dst;
  int passes, live;      // passes with a row in the CTA's tile; of them, rows below M

  __device__ __forceinline__ LinearDenseXCopies(const LinearArgs& args, const LinearThread& th) {
    const int threads = th.warps * 32, tid = th.warp * 32 + th.lane, rows_per_pass = threads / 16;
    const int token = tid / 16, c = tid % 16;
    passes = (Layout::kTokens * 16 - tid + threads - 1) / threads;
    const int64_t first = th.token0 + token;
    const int64_t below_m = first >= args.m ? 0 : (args.m - first + rows_per_pass - 1) / rows_per_pass;
    live = static_cast<int>(below_m < passes ? below_m : passes);
    const int64_t row = first < args.m ? first : args.m - 1;
    src = static_cast<const uint8_t*>(args.x) + (row * args.k + th.step_begin * kLinearStepElems + c * 8) * 2;
    row_bytes = static_cast<int64_t>(rows_per_pass) * args.k * 2;
    dst = static_cast<uint32_t>(Layout::x_offset(th.warps)) + x_chunk_offset(token, c);
    pass_dst = rows_per_pass * 256;
  }
  // Copies the next step into the stage at `stage` (shared address).
  __device__ __forceinline__ void issue_next(uint32_t stage) {
#pragma unroll
    for (int h = 0; h < kMaxPasses; ++h) {
      if (h < passes) cp_async_16_or_zeros(stage + dst + h * pass_dst, h < live ? src + h * row_bytes : src, h < live);
    }
    src += 256;
  }
};

// The same copies of dense x computed afresh each step (no state kept across steps): for 8 column
// tiles, whose accumulators leave no registers for LinearDenseXCopies' pointers.
template <class Layout>
__device__ __forceinline__ void linear_issue_dense_x(const LinearArgs& args, const LinearThread& th, int64_t step, uint32_t stage) {
  using XT = typename Layout::XType;
  const uint32_t x_stage = stage + Layout::x_offset(th.warps);
  const int threads = th.warps * 32, tid = th.warp * 32 + th.lane;
  for (int q = tid; q < Layout::kTokens * 16; q += threads) {
    const int token = q >> 4, c = q & 15;
    const bool valid = th.token0 + token < args.m;
    const XT* src = static_cast<const XT*>(args.x) + (valid ? (th.token0 + token) * args.k + step * kLinearStepElems + c * 8 : 0);
    cp_async_16_or_zeros(x_stage + x_chunk_offset(token, c), src, valid);
  }
}

// One B register of the decoders' pairing from 8 elements of dense x in their natural order.
__device__ __forceinline__ uint32_t pair_for(Pairing pairing, const uint32_t (&words)[4], int r) {
  const int lo = element_for(pairing, r, 0), hi = element_for(pairing, r, 1);
  return __byte_perm(words[lo / 2], words[hi / 2], (lo % 2 ? 0x32u : 0x10u) | ((hi % 2 ? 0x76u : 0x54u) << 8));
}

// The inverse of pair_for: registers in `pairing` back to 8 elements in their natural order
// (pairs (0,1) (2,3) (4,5) (6,7)), one byte_perm per word.
__device__ __forceinline__ Regs4 natural_order(Pairing pairing, const Regs4& paired) {
  const auto half_of = [&](int element) {  // (register, half) holding `element`
    for (int r = 0; r < 4; ++r) {
      for (int h = 0; h < 2; ++h) {
        if (element_for(pairing, r, h) == element) return 2 * r + h;
      }
    }
    return 0;
  };
  Regs4 out;
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    const int lo = half_of(2 * w), hi = half_of(2 * w + 1);
    out.reg[w] = __byte_perm(paired.reg[lo / 2], paired.reg[hi / 2], (lo % 2 ? 0x32u : 0x10u) | ((hi % 2 ? 0x76u : 0x54u) << 8));
  }
  return out;
}

// The decoders' element pairing, which dense x must share (the same for NVFP4's and MXFP4's
// decoders of one type, see LinearScaling and DenseOperand).
template <typename XT>
constexpr Pairing kLinearPairing = DenseOperand<XT>::kPairing;

// 8 elements of dense x (pairs (0,1) (2,3) (4,5) (6,7)) as the four B registers of the decoders'
// pairing: register r = (element_for(r, 0), element_for(r, 1)).
template <typename XT>
__device__ __forceinline__ uint4 paired_x_chunk(uint4 raw) {
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
  return make_uint4(pair_for(kLinearPairing<XT>, words, 0), pair_for(kLinearPairing<XT>, words, 1),
                    pair_for(kLinearPairing<XT>, words, 2), pair_for(kLinearPairing<XT>, words, 3));
}

// How the family's helper kernels (each launched as a programmatic dependent, linear.cu) start:
// they let the kernel after them launch at once (it waits for this grid before it reads anything,
// and meanwhile starts its own CTAs and weight prefetches), then wait for the kernel before them,
// which may have written what they read.
__device__ __forceinline__ void linear_dependent_start() {
  let_dependents_launch();
  wait_for_primary_grid();
}

// Dense x, permuted once per call so that every 16 bytes (8 elements, pairs (0,1) (2,3) (4,5)
// (6,7)) hold the B registers of the decoders' pairing: register r = (element_for(r, 0),
// element_for(r, 1)). The kernel then reads its B operands with one shared load per 8 elements,
// and the CTAs of every K range share the work. Runs as a programmatic dependent: waits for the
// kernel that wrote x, and lets linear_mma_kernel start (and prefetch its weight) meanwhile.
template <typename XT>
__global__ void __launch_bounds__(256) linear_permute_x_kernel(const uint4* __restrict__ x, uint4* __restrict__ out, int64_t chunks) {
  linear_dependent_start();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < chunks; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = paired_x_chunk<XT>(x[i]);
  }
}

// FP4 x (W4A4) is decoded once per call into the dense x the kernels take, 8 elements (32 bits of
// codes, chunk i of `codes`: [M, K/2] bytes as words) at a time, with `scales` ([M, K/block] codes,
// linear), as four registers in the decoders' pairing:
// - NVFP4: the fp16 decoder's registers, each times the factor of its block's scale
//   (LinearScaling<__half>, as W is prescaled: exact, carrying 2^kExponent, which the kernel undoes
//   with W's: LinearArgs::x_prescaled);
// - MXFP4: each element's exact value e2m1 * 2^(E - 127) in bf16 (E its block's E8M0 code; NaN where
//   E is 0xFF). bf16 holds every one of them, as a subnormal down to 2^-128 (E = 0), except those of
//   2^128 and more (E 253 and 254 with the larger elements), beyond fp32 too, which become
//   infinities. So MXFP4 x gives the bits of its bf16 dequantization as dense x.
struct PrescaledNvfp4XChunk {
  static constexpr Pairing kPairing = LinearScaling<__half>::kPairing;
  static __device__ __forceinline__ Regs4 decode(const uint32_t* __restrict__ codes, const uint8_t* __restrict__ scales, int64_t i) {
    using Scaling = LinearScaling<__half>;
    Regs4 v = Scaling::decode(codes[i]);
    const uint32_t factor = Scaling::factor(e4m3x2_to_float2(scales[i / 2]).x);  // 16-element blocks: two chunks each
#pragma unroll
    for (int r = 0; r < 4; ++r) v.reg[r] = Scaling::mul(v.reg[r], factor);
    return v;
  }
};
struct ExactMxfp4XChunk {
  static constexpr Pairing kPairing = kLinearPairing<__nv_bfloat16>;
  static __device__ __forceinline__ Regs4 decode(const uint32_t* __restrict__ codes, const uint8_t* __restrict__ scales, int64_t i) {
    const uint32_t e = scales[i / 4];  // 32-element blocks: four chunks each
    // 2^(E - 127) in both halves: bf16's exponent field is the E8M0 code; 2^-127 is the subnormal 0x0040.
    const uint32_t factor = e == kE8M0NaN ? 0x7FC07FC0u : e == 0 ? 0x00400040u : (e << 7 | e << 23);
    Regs4 v = DenseOperand<__nv_bfloat16>::decode(codes[i]);  // exact E2M1 values
#pragma unroll
    for (int r = 0; r < 4; ++r) v.reg[r] = LinearScaling<__nv_bfloat16>::mul(v.reg[r], factor);
    return v;
  }
};

// FP4 x decoded once per call (Chunk: PrescaledNvfp4XChunk, ExactMxfp4XChunk) for the dense kernels.
// kPaired: 16 bytes in the pairing in which linear_permute_x_kernel leaves dense x; else in the
// natural order, which the one-tile kernel staged per step pairs as it loads. Rows of whole steps.
template <class Chunk, bool kPaired>
__global__ void __launch_bounds__(256) linear_decode_x_kernel(const uint32_t* __restrict__ codes, const uint8_t* __restrict__ scales,
                                                             uint4* __restrict__ out, int64_t chunks) {
  linear_dependent_start();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < chunks; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    Regs4 v = Chunk::decode(codes, scales, i);
    if constexpr (!kPaired) v = natural_order(Chunk::kPairing, v);
    out[i] = make_uint4(v.reg[0], v.reg[1], v.reg[2], v.reg[3]);
  }
}

// 8 elements of dense x as B registers in the decoders' pairing (register r = (element_for(r, 0),
// element_for(r, 1))): as loaded where linear_permute_x_kernel put them in that order, else paired
// here from their natural order (pairs (0,1) (2,3) (4,5) (6,7)), one byte_perm per register.
template <class Layout>
__device__ __forceinline__ Regs4 dense_b(uint4 v) {
  if constexpr (!Layout::kXPermuted && !Layout::kXResident) v = paired_x_chunk<typename Layout::XType>(v);
  return {{v.x, v.y, v.z, v.w}};
}

// Resident x: the CTA's K range of its rows of x (token0 .. token0 + resident_live_tokens - 1), in
// the decoders' pairing, in shared memory at `x_res`: row `token` at token * range_steps * 256
// bytes, each step's 16 chunks at x_chunk_offset. Staged in two passes over the same chunks of
// each thread: linear_copy_resident_x (cp.async, one commit group, in flight with the ring's first
// steps), then, once this thread's copies have landed, linear_pair_resident_x in place where x did
// not arrive paired; a CTA barrier then publishes the whole.
template <class Layout>
__device__ __forceinline__ int resident_live_tokens(const LinearArgs& args, const LinearThread& th) {
  if constexpr (Layout::kResidentRowChunks) {
    return static_cast<int>(args.m - th.token0 < Layout::kTokens ? args.m - th.token0 : Layout::kTokens);
  } else {
    return args.live_tokens;
  }
}
template <class Layout, class Fn>
__device__ __forceinline__ void for_resident_x_chunks(const LinearArgs& args, const LinearThread& th, int64_t count, Fn&& fn) {
  const int threads = th.warps * 32, tid = th.warp * 32 + th.lane;
  const int chunks = static_cast<int>(count) * 16;  // 16 chunks of 8 elements a step
  const uint32_t stride = static_cast<uint32_t>(args.range_steps) * 256;
  for (int token = 0; token < resident_live_tokens<Layout>(args, th); ++token) {
    for (int q = tid; q < chunks; q += threads) fn(token, q, (q >> 4) * 256 + x_chunk_offset(token, q & 15, stride));
  }
}
template <class Layout>
__device__ __forceinline__ void linear_copy_resident_x(const LinearArgs& args, const LinearThread& th, uint32_t x_res, int64_t count) {
  using XT = typename Layout::XType;
  for_resident_x_chunks<Layout>(args, th, count, [&](int token, int q, uint32_t offset) {
    const int64_t row = Layout::kResidentRowChunks ? th.token0 + token : token;
    cp_async_16_streaming(x_res + offset, static_cast<const XT*>(args.x) + row * args.k + th.step_begin * kLinearStepElems + q * 8);
  });
  cp_async_commit();
}
template <class Layout>
__device__ __forceinline__ void linear_pair_resident_x(const LinearArgs& args, const LinearThread& th, uint32_t x_res, int64_t count) {
  if (args.x_paired) return;
  for_resident_x_chunks<Layout>(args, th, count, [&](int, int, uint32_t offset) {
    sts_128(x_res + offset, paired_x_chunk<typename Layout::XType>(lds_128(x_res + offset)));
  });
}

// The four NVFP4 block-scale codes lane t uses in one step from a row's 8 codes (lo: blocks 0-3,
// hi: 4-7): block 2u + t/2 for unit u, as byte u.
__device__ __forceinline__ uint32_t lane_block_codes(uint2 codes, uint32_t selector) {
  return __byte_perm(codes.x, codes.y, selector);
}

// NVFP4, one step of a warp's weight: per unit u and row half h (rows g, g + 8), the factor (block
// scale x 2^kFactorExponent, LinearScaling) of the lane's block in half u % 2 of factors[u][h],
// from the step's scales of row g at scales_g (row g + 8's 8 codes kLinearScaleRowsBelow after).
template <class Scaling>
__device__ __forceinline__ void nvfp4_lane_factors(uint32_t scales_g, uint32_t nvfp4_selector, uint32_t (&factors)[4][2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint32_t codes = lane_block_codes(lds_64(scales_g + kLinearScaleRowsBelow * h), nvfp4_selector);
    factors[0][h] = factors[1][h] = Scaling::factor_pair(codes & 0xFFFFu);
    factors[2][h] = factors[3][h] = Scaling::factor_pair(codes >> 16);
  }
}

// 0xFF in each byte of `x` whose bit 7 is set, 0 elsewhere: prmt's sign-replicating selectors
// (bit 3 of each nibble), which __byte_perm does not promise to keep.
__device__ __forceinline__ uint32_t replicate_byte_signs(uint32_t x) {
  uint32_t out;
  asm("prmt.b32 %0, %1, 0, 0xBA98;" : "=r"(out) : "r"(x));
  return out;
}

// MXFP4, one step of a warp's weight: per unit u and row half h, the factor of the lane's block
// (Mxfp4Prescaling<MmaT>, in both halves, so in half u % 2 as nvfp4_lane_factors gives it), from
// the step's 4 codes of row g at scales_g (row g + 8's kLinearScaleRowsBelow after). A block whose
// code is outside the window gets the factor 0, so that its MMAs add zero products, and
// linear_mxfp4_outside_pass adds it; every other block keeps its factor, so a row's sums never
// depend on another row's codes. The factors do not wait for the warp's vote, which only reports
// whether any code of the step is outside (the same answer in every lane).
template <typename MmaT>
__device__ __forceinline__ bool mxfp4_lane_factors(uint32_t scales_g, uint32_t (&factors)[4][2]) {
  using P = Mxfp4Prescaling<MmaT>;
  constexpr uint32_t kOnes = 0x01010101u;
  const uint32_t codes[2] = {lds_u32(scales_g), lds_u32(scales_g + kLinearScaleRowsBelow)};
  const uint32_t outside[2] = {mxfp4_codes_outside<P>(codes[0]), mxfp4_codes_outside<P>(codes[1])};
  const bool any_outside = __any_sync(0xFFFFFFFFu, (outside[0] | outside[1]) != 0);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    // Each byte E + kFieldBias, within 1..254 inside the window; no byte may carry or borrow into the next.
    uint32_t fields;
    if constexpr (P::kFieldBias >= 0) {
      // The window starts at code 0, so an outside code has bit 7 set: cleared, it plus the bias
      // stays below 256 and carries nowhere; the mask then zeroes its field.
      static_assert(P::kMinCode == 0 && P::kMaxCode >= 127 && 127 + P::kFieldBias <= 255);
      fields = ((codes[h] & ~outside[h]) + static_cast<uint32_t>(P::kFieldBias) * kOnes) & ~replicate_byte_signs(outside[h]);
    } else {
      // An outside code replaced by -kFieldBias becomes the field 0 and borrows nothing.
      constexpr uint32_t kBias = static_cast<uint32_t>(-P::kFieldBias) * kOnes;
      const uint32_t zeroed = replicate_byte_signs(outside[h]);
      fields = ((codes[h] & ~zeroed) | (kBias & zeroed)) - kBias;
    }
#pragma unroll
    for (uint32_t u = 0; u < 4; ++u) factors[u][h] = __byte_perm(fields, 0u, 0x4040u | u | u << 8) << P::kFieldShift;
  }
  return any_outside;
}

// A lane's fixed offsets (kept in registers): into a stage (the steps add the stage's address), the
// ldmatrix rows of its warp's units 0-1 and 2-3 (lane l addresses row (l / 8 % 2) * 8 + l % 8 of
// unit u0 + l / 16, for u0 = 0 and 2); into shared memory, row g of its warp's scale ring, and that
// row's swizzle (the steps add their place XOR it: linear_step_scales); and the selector of its
// NVFP4 block scales (lane_block_codes).
struct LinearLaneOffsets {
  uint32_t ldm0, ldm1, scales_g, scales_swizzle, nvfp4_selector;
};
template <class Layout>
__device__ __forceinline__ LinearLaneOffsets linear_lane_offsets(const LinearThread& th) {
  const int ldm_row = (th.lane >> 3 & 1) * 8 + (th.lane & 7), ldm_unit = th.lane >> 4;
  const uint32_t codes = th.warp * Layout::kWCodeBytes, half = th.t / 2;
  return {kept_in_register(codes + w_unit_offset(ldm_row, ldm_unit)), kept_in_register(codes + w_unit_offset(ldm_row, 2 + ldm_unit)),
          kept_in_register(static_cast<uint32_t>(Layout::scale_ring_offset(th.warps)) + th.warp * Layout::ScaleRing::kWarpBytes +
                           th.g * Layout::ScaleRing::kRingBytes),
          kept_in_register(Layout::ScaleRing::swizzle(th.g)), half | (2 + half) << 4 | (4 + half) << 8 | (6 + half) << 12};
}
// The shared address of the step's scales of row g, the step at `position` in the scale ring
// (`ring`: the shared memory's address).
template <class Layout>
__device__ __forceinline__ uint32_t linear_step_scales(uint32_t ring, const LinearLaneOffsets& lane, uint32_t position) {
  return ring + lane.scales_g + (position ^ lane.scales_swizzle);
}

template <class Layout>
struct LinearAccumulators {
  float v[Layout::kTokens / 8][4];
};

// The factors of a step, and whether a block of it lies outside MXFP4's window (mxfp4_lane_factors;
// never for NVFP4).
template <class Layout>
__device__ __forceinline__ bool prescaled_lane_factors(uint32_t scales_g, const LinearLaneOffsets& lane, uint32_t (&factors)[4][2]) {
  if constexpr (Layout::kNvfp4) {
    nvfp4_lane_factors<LinearScaling<typename Layout::MmaT>>(scales_g, lane.nvfp4_selector, factors);
    return false;
  } else {
    return mxfp4_lane_factors<typename Layout::MmaT>(scales_g, factors);
  }
}

// One step of one warp: the weight's 4 units of 32 elements (rows g and g + 8 per lane; the step's
// scales of row g at scales_g, a shared address) against every column tile of x. Dense x: the
// lane's chunk 4u + t of row 8j + g of this step at x_step + x_lane[j][u % 2] + 64u (in the stage,
// or in resident x; x_lane_offsets). Returns whether the step had a block outside MXFP4's
// prescaling window (mxfp4_lane_factors).
template <class Layout>
__device__ __forceinline__ bool linear_compute_step(const LinearThread& th, uint32_t stage, uint32_t scales_g, uint32_t x_step,
                                                    const uint32_t (&x_lane)[Layout::kTokens / 8][2],
                                                    const LinearLaneOffsets& lane, LinearAccumulators<Layout>& acc) {
  using MmaT = typename Layout::MmaT;
  using Scaling = LinearScaling<MmaT>;
  constexpr int kNt = Layout::kTokens / 8;
  const uint4 units01 = ldmatrix_x4(stage + lane.ldm0), units23 = ldmatrix_x4(stage + lane.ldm1);
  // words[u][h]: unit u of row g (h = 0) or g + 8 (h = 1).
  const uint32_t words[4][2] = {{units01.x, units01.y}, {units01.z, units01.w}, {units23.x, units23.y}, {units23.z, units23.w}};

  uint32_t factors[4][2];
  const bool outside = prescaled_lane_factors<Layout>(scales_g, lane, factors);
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    Regs4 a0 = Scaling::decode(words[u][0]), a1 = Scaling::decode(words[u][1]);
#pragma unroll
    for (int r = 0; r < 4; ++r) a0.reg[r] = Scaling::mul(a0.reg[r], factors[u][0], u % 2), a1.reg[r] = Scaling::mul(a1.reg[r], factors[u][1], u % 2);
#pragma unroll
    for (int j = 0; j < kNt; ++j) {
      const Regs4 b = dense_b<Layout>(lds_128(x_step + x_lane[j][u % 2] + 64 * u));
      mma_m16n8k16<MmaT>(acc.v[j], {a0.reg[0], a1.reg[0], a0.reg[1], a1.reg[1]}, b.reg[0], b.reg[1]);
      mma_m16n8k16<MmaT>(acc.v[j], {a0.reg[2], a1.reg[2], a0.reg[3], a1.reg[3]}, b.reg[2], b.reg[3]);
    }
  }
  return outside;
}

// MXFP4: the blocks outside the window (whose MMAs in the main loop added zero products), added to
// their rows' sums after the main loop, step by step, as per-block scaling adds them: the dense
// decoder's values (exact E2M1 values times 2^kDecodeExponent), each block's two MMAs into a zeroed
// fragment, that power undone (exact), then one fma by the block scale times 2^kCarriedExponent
// (what the prescaled sums carry). Only warps that met such a step run it, the whole warp's MMAs,
// but only an outside block's sum is added; it reads W and x from global memory,
// `dense_b(step, j, u)` giving the lane's B registers of unit u and column tile j. Every kernel
// adds the same products in this order, so a row's bits depend neither on which one ran nor on
// the other rows' codes.
template <class Layout, class DenseB>
__device__ __forceinline__ void linear_mxfp4_outside_pass(const LinearArgs& args, const LinearThread& th, LinearAccumulators<Layout>& acc,
                                                       DenseB&& dense_b) {
  static_assert(!Layout::kNvfp4);
  using MmaT = typename Layout::MmaT;
  using P = Mxfp4Prescaling<MmaT>;
  constexpr int kNt = Layout::kTokens / 8, kDecodeExponent = DenseOperand<MmaT>::kDecodeExponent;
  const int64_t k_bytes = args.k / 2, k_blocks = args.k / Mxfp4Format::kBlock;
  const uint32_t* codes[2];
  const uint32_t* scales[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t row = th.row0 + th.g + 8 * h < args.n ? th.row0 + th.g + 8 * h : args.n - 1;
    codes[h] = reinterpret_cast<const uint32_t*>(args.w_data + row * k_bytes) + th.t;  // word t of each unit
    scales[h] = reinterpret_cast<const uint32_t*>(args.w_scales + row * k_blocks);     // a step's 4 codes a word
  }
  for (int64_t step = th.step_begin; step < th.step_end; ++step) {
    const uint32_t step_codes[2] = {scales[0][step], scales[1][step]};
    const uint32_t outside[2] = {mxfp4_codes_outside<P>(step_codes[0]), mxfp4_codes_outside<P>(step_codes[1])};
    if (!__any_sync(0xFFFFFFFFu, (outside[0] | outside[1]) != 0)) continue;
#pragma unroll 1  // a cold path: its registers must not raise the kernel's
    for (int u = 0; u < 4; ++u) {
      const Regs4 a0 = DenseOperand<MmaT>::decode(codes[0][step * 16 + 4 * u]), a1 = DenseOperand<MmaT>::decode(codes[1][step * 16 + 4 * u]);
      float sa[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t e = step_codes[h] >> (8 * u) & 0xFFu;
        sa[h] = e == kE8M0NaN ? bits_to_float(0x7FC00000u) : exp2_int(static_cast<int>(e) - 127 + P::kCarriedExponent);
      }
#pragma unroll
      for (int j = 0; j < kNt; ++j) {
        // At 16 column tiles, one tile at a time: else the compiler hoists every tile's B loads
        // above the first MMA, more registers than the main loop needs, and they set the kernel's.
        if constexpr (kNt == 16) asm volatile("" ::: "memory");
        const Regs4 b = dense_b(step, j, u);
        float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        mma_m16n8k16<MmaT>(d, {a0.reg[0], a1.reg[0], a0.reg[1], a1.reg[1]}, b.reg[0], b.reg[1]);
        mma_m16n8k16<MmaT>(d, {a0.reg[2], a1.reg[2], a0.reg[3], a1.reg[3]}, b.reg[2], b.reg[3]);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float exact = kDecodeExponent == 0 ? d[i] : mul_rn(d[i], exp2_int(-kDecodeExponent));
          if (outside[i / 2] >> (8 * u + 7) & 1u) acc.v[j][i] = __fmaf_rn(exact, sa[i / 2], acc.v[j][i]);
        }
      }
    }
  }
}

// The lane's B registers of unit u, column tile j, step `step` for linear_mxfp4_outside_pass, from
// dense x in global memory (paired here where it did not arrive paired); zeros past M.
template <class Layout>
__device__ __forceinline__ Regs4 dense_b_from_global(const LinearArgs& args, const LinearThread& th, int64_t step, int j, int u) {
  using XT = typename Layout::XType;
  const int64_t token = th.token0 + 8 * j + th.g;
  if (token >= args.m) return Regs4{};
  uint4 v = *reinterpret_cast<const uint4*>(static_cast<const XT*>(args.x) + token * args.k + step * kLinearStepElems + (4 * u + th.t) * 8);
  if (!args.x_paired) v = paired_x_chunk<XT>(v);
  return {{v.x, v.y, v.z, v.w}};
}

// What out[token, feature] takes besides its sum: the global scales (NVFP4 W's, FP4 x's) and the
// bias element, each applied only where the call has one (a multiply by 1 or an add of 0 could
// change a NaN's payload or a -0). The reductions read the global scales and their first output's
// bias before their dependency wait: read at the store, after the adds, they cost one more trip to
// memory at the end of a short kernel, and read with the partials, one trip to DRAM (a layer's
// scale and bias leave L2 while the layers stream their weights) where the partials alone take one
// to L2. Reading them early is safe: no kernel of the call writes them, and the reductions start
// only after every CTA of linear_mma_kernel has passed its own wait, so whatever wrote them has
// completed.
struct LinearGlobalScales {
  float w, x;
  bool has_w, has_x;
};
__device__ __forceinline__ LinearGlobalScales linear_global_scales(const LinearArgs& args) {
  return {args.w_global != nullptr ? *args.w_global : 1.0f, args.x_global != nullptr ? *args.x_global : 1.0f,
          args.w_global != nullptr, args.x_global != nullptr};
}
__device__ __forceinline__ float linear_bias(const LinearArgs& args, int64_t feature) {
  switch (args.bias_type) {
    case LinearBias::kFloat: return static_cast<const float*>(args.bias)[feature];
    case LinearBias::kHalf: return __half2float(static_cast<const __half*>(args.bias)[feature]);
    case LinearBias::kBFloat16: return __bfloat162float(static_cast<const __nv_bfloat16*>(args.bias)[feature]);
    default: return 0.0f;
  }
}

// out[token, feature] = y, rounded once to the output type.
__device__ __forceinline__ void linear_put(const LinearArgs& args, int64_t token, int64_t feature, float y) {
  const int64_t at = token * args.n + feature;
  switch (args.out_type) {
    case LinearOut::kFloat: static_cast<float*>(args.out)[at] = y; break;
    case LinearOut::kHalf: static_cast<__half*>(args.out)[at] = __float2half_rn(y); break;
    default: static_cast<__nv_bfloat16*>(args.out)[at] = __float2bfloat16_rn(y); break;
  }
}

// out[token, feature] from a K range's sum (or the sum of all ranges): the global scales, then the
// bias, then one rounding to the output type. The first form reads them at the store (the linear
// kernels' own stores, after their main loop; its bias switch is written out, since through
// linear_bias ptxas compiled those kernels' tails differently); the second takes them read before
// (the reductions).
__device__ __forceinline__ void linear_store(const LinearArgs& args, int64_t token, int64_t feature, float sum) {
  float y = sum;
  if (args.w_global != nullptr) y = mul_rn(y, *args.w_global);
  if (args.x_global != nullptr) y = mul_rn(y, *args.x_global);
  switch (args.bias_type) {
    case LinearBias::kFloat: y = __fadd_rn(y, static_cast<const float*>(args.bias)[feature]); break;
    case LinearBias::kHalf: y = __fadd_rn(y, __half2float(static_cast<const __half*>(args.bias)[feature])); break;
    case LinearBias::kBFloat16: y = __fadd_rn(y, __bfloat162float(static_cast<const __nv_bfloat16*>(args.bias)[feature])); break;
    default: break;
  }
  linear_put(args, token, feature, y);
}
__device__ __forceinline__ void linear_store(const LinearArgs& args, const LinearGlobalScales& scales, float bias, int64_t token,
                                             int64_t feature, float sum) {
  float y = sum;
  if (scales.has_w) y = mul_rn(y, scales.w);
  if (scales.has_x) y = mul_rn(y, scales.x);
  if (args.bias_type != LinearBias::kNone) y = __fadd_rn(y, bias);
  linear_put(args, token, feature, y);
}

// At least two CTAs per SM (at most 128 registers) where ptxas would otherwise use fewer registers
// than that and recompute per-thread constants every step (resident x; 8 column tiles, whose ring
// allows two CTAs anyway).
template <class Format, typename XT, int kNt, bool kResident>
constexpr int kLinearMinCtas = kResident || kNt == 8 ? 2 : 0;

// A CTA's sums out: acc.v[j][i] is weight row g (i < 2) or g + 8, token 8j + 2t + i % 2. Prescaled
// operands carried a power of two each (Layout::kWCarriedExponent; pre-decoded NVFP4 x,
// args.x_prescaled: LinearScaling's kExponent); undone exactly here, in one multiply. Then out (one
// K range) or the K range's partials.
//
// Partials from 4 and more column tiles go through one pointer a lane, stepping 8 rows of x a
// tile, with the live rows and features tested once as 32-bit counts: the per-element form's
// 64-bit index and bounds tests per sum would be most of the tail's instructions there. Up to 2
// tiles the per-element form stays: those kernels' main loops are allocated around it.
template <class Layout>
__device__ __forceinline__ void linear_store_sums(const LinearArgs& args, const LinearThread& th, const LinearAccumulators<Layout>& acc) {
  using MmaT = typename Layout::MmaT;
  constexpr int kNt = Layout::kTokens / 8;
  // (The exponent is the device code's: the decoder, and with it kExponent, depends on the architecture.)
  constexpr int kCarried = Layout::kWCarriedExponent;
  const int carried = kCarried + (Layout::kNvfp4 && args.x_prescaled ? LinearScaling<MmaT>::kExponent : 0);
  const float undo = exp2_int(-carried);
  const auto sum_of = [&](int j, int i) { return carried == 0 ? acc.v[j][i] : mul_rn(acc.v[j][i], undo); };
  if (kNt <= 2 || args.splits == 1) {
#pragma unroll
    for (int j = 0; j < kNt; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t feature = th.row0 + th.g + 8 * (i / 2), token = th.token0 + 8 * j + 2 * th.t + i % 2;
        if (feature >= args.n || token >= args.m) continue;
        if (args.splits == 1) {
          linear_store(args, token, feature, sum_of(j, i));
        } else {
          args.partials[(static_cast<int64_t>(blockIdx.y) * args.m + token) * args.n + feature] = sum_of(j, i);
        }
      }
    }
    return;
  }
  const int64_t feature = th.row0 + th.g, token = th.token0 + 2 * th.t;
  const bool low_live = feature < args.n, high_live = feature + 8 < args.n;
  // Rows of x live from the lane's first token on, at most the tiles' reach (<= 0: none).
  const int live_rows = static_cast<int>(args.m - token < Layout::kTokens ? args.m - token : Layout::kTokens);
  float* row = args.partials + (static_cast<int64_t>(blockIdx.y) * args.m + token) * args.n + feature;
  const int64_t tile_stride = 8 * args.n;
#pragma unroll
  for (int j = 0; j < kNt; ++j) {
#pragma unroll
    for (int odd = 0; odd < 2; ++odd) {
      if (8 * j + odd < live_rows) {
        if (low_live) row[odd * args.n] = sum_of(j, odd);
        if (high_live) row[odd * args.n + 8] = sum_of(j, 2 + odd);
      }
    }
    row += tile_stride;
  }
}

// One CTA's K range, once the grid dependency wait is over: the ring, the main loop and the
// stores of its sums (out, or the K range's partials).
template <class Layout>
__device__ __forceinline__ void linear_mma_cta(const LinearArgs& args, const LinearThread& th, int count, uint8_t* smem) {
  constexpr int kNt = Layout::kTokens / 8;
  const uint32_t ring = shared_address(smem);
  const size_t x_res_offset = Layout::smem_bytes(th.warps);
  if constexpr (Layout::kXResident) linear_copy_resident_x<Layout>(args, th, ring + static_cast<uint32_t>(x_res_offset), count);
  const uint32_t stage_bytes = static_cast<uint32_t>(Layout::stage_bytes(th.warps)), ring_end = ring + kLinearStages * stage_bytes;
  const uint32_t scale_ring = ring + static_cast<uint32_t>(Layout::scale_ring_offset(th.warps)) + th.warp * Layout::ScaleRing::kWarpBytes;
  LinearWeightCopies<Layout> weight(args, th, scale_ring);
  [[maybe_unused]] LinearDenseXCopies<Layout> x_copies(args, th);  // the per-step kernel's dense x, <= 4 tiles
  uint32_t issue_stage = ring;  // the stage of step i + kLinearStages - 1 when step i is computed
  const auto issue = [&](int i) {
    if (i < count) {
      weight.issue_next(args, th, issue_stage);
      if constexpr (!Layout::kXResident && kNt == 8) {
        linear_issue_dense_x<Layout>(args, th, th.step_begin + i, issue_stage);
      } else if constexpr (!Layout::kXResident) {
        x_copies.issue_next(issue_stage);
      }
    }
    cp_async_commit();
    issue_stage = issue_stage + stage_bytes == ring_end ? ring : issue_stage + stage_bytes;
  };
#pragma unroll
  for (int i = 0; i < kLinearStages - 1; ++i) issue(i);

  // Resident x: staged while the ring's first copies are on their way; one barrier publishes it.
  // Lanes whose row of x is past M read the zeroed row after the live ones instead.
  const uint32_t x_stride = static_cast<uint32_t>(args.range_steps) * 256;
  if constexpr (Layout::kXResident) {
    const int zero_chunks = resident_live_tokens<Layout>(args, th) < Layout::kTokens ? args.range_steps * 16 : 0;
    uint4* x_zeros =
        reinterpret_cast<uint4*>(smem + x_res_offset + static_cast<size_t>(resident_live_tokens<Layout>(args, th)) * x_stride);
    for (int b = threadIdx.x; b < zero_chunks; b += blockDim.x) x_zeros[b] = make_uint4(0, 0, 0, 0);
    cp_async_wait<kLinearStages - 1>();  // this thread's x copies (the group before the ring's)
    linear_pair_resident_x<Layout>(args, th, ring + static_cast<uint32_t>(x_res_offset), count);
    __syncthreads();
  }
  // The lane's row 8j + g of x relative to the step's x: in the stage, rows 256 bytes apart;
  // resident, rows x_stride apart, or the zeroed row for rows past M. Then x_lane[j][u % 2] + 64u is
  // its chunk 4u + t there: x_chunk_in_row(token, 4u + t) = 64 (u ^ p) + 16t with p the row's parity
  // (g's), and 64 (u ^ p) = 64u + 64p for even u, 64u - 64p for odd u.
  uint32_t x_lane[kNt][2];
#pragma unroll
  for (int j = 0; j < kNt; ++j) {
    const int token = 8 * j + th.g;
    const uint32_t row = !Layout::kXResident ? token * 256u
                                             : (token < resident_live_tokens<Layout>(args, th) ? token
                                                                                              : resident_live_tokens<Layout>(args, th)) *
                                                   x_stride;
    const uint32_t parity = (th.g & 1) * 64u;
    x_lane[j][0] = row + 16 * th.t + parity, x_lane[j][1] = row + 16 * th.t - parity;
  }

  const LinearLaneOffsets lane = linear_lane_offsets<Layout>(th);

  LinearAccumulators<Layout> acc;
#pragma unroll
  for (int j = 0; j < kNt; ++j) acc.v[j][0] = acc.v[j][1] = acc.v[j][2] = acc.v[j][3] = 0.0f;

  uint32_t stage = ring;
  uint32_t x_resident_step = ring + static_cast<uint32_t>(x_res_offset);  // resident x: step i of every row
  uint32_t scales_position = Layout::ScaleRing::position(th.step_begin);  // step i's in the scale ring
  bool outside_seen = false;  // a step outside MXFP4's prescaling window (warp-uniform)
  for (int i = 0; i < count; ++i) {
    cp_async_wait<kLinearStages - 2>();  // this thread's copies of step i have landed ...
    if constexpr (Layout::kXResident) {
      __syncwarp();                      // ... and the warp's (the ring holds only its own rows)
    } else {
      __syncthreads();                   // ... and every thread's (x is shared); stage (i - 1) is free
    }
    issue(i + kLinearStages - 1);
    if constexpr (Layout::kXResident) {
      outside_seen |= linear_compute_step<Layout>(th, stage, linear_step_scales<Layout>(ring, lane, scales_position), x_resident_step, x_lane,
                                                  lane, acc);
      x_resident_step += 256;
    } else {
      outside_seen |= linear_compute_step<Layout>(th, stage, linear_step_scales<Layout>(ring, lane, scales_position),
                                                  stage + static_cast<uint32_t>(Layout::x_offset(th.warps)), x_lane, lane, acc);
    }
    stage = stage + stage_bytes == ring_end ? ring : stage + stage_bytes;
    scales_position = Layout::ScaleRing::next(scales_position);
  }
  cp_async_wait<0>();
  if constexpr (!Layout::kNvfp4) {
    if (outside_seen) {
      linear_mxfp4_outside_pass<Layout>(args, th, acc, [&](int64_t step, int j, int u) { return dense_b_from_global<Layout>(args, th, step, j, u); });
    }
  }

  linear_store_sums<Layout>(args, th, acc);
}

// What every thread of a linear kernel does first: its place in the grid, then, launched as a
// programmatic dependent (linear.cu), the first prefetch_steps of its warp's weight range to L2
// while the kernel before finishes (an L2 prefetch is coherent with any write that kernel makes),
// and the wait for it before the first copy, since it may have written x or the weight. The kernel
// after (the K ranges' reduction, or the next layer) may launch from here on: it waits for this
// grid to finish before it reads anything, and meanwhile prefetches its own.
template <class Layout>
__device__ __forceinline__ int linear_kernel_begin(const LinearArgs& args, LinearThread& th) {
  using Format = typename Layout::Format;
  th.lane = threadIdx.x % 32, th.warp = threadIdx.x / 32, th.warps = blockDim.x / 32;
  th.g = th.lane / 4, th.t = th.lane % 4;
  th.row0 = (static_cast<int64_t>(blockIdx.x) * th.warps + th.warp) * kLinearTileRows;
  th.token0 = static_cast<int64_t>(blockIdx.z) * Layout::kTokens;
  th.step_begin = args.steps * blockIdx.y / args.splits;
  th.step_end = args.steps * (blockIdx.y + 1) / args.splits;
  const int count = static_cast<int>(th.step_end - th.step_begin);  // at most range_steps, an int
#if defined(FP4OPS_HW_PDL)
  {
    const int ahead = count < args.prefetch_steps ? count : args.prefetch_steps;
    const int r = th.lane % kLinearTileRows;
    const int64_t row = th.row0 + r < args.n ? th.row0 + r : args.n - 1;
    if (th.lane < kLinearTileRows) {
      if (ahead > 0) prefetch_l2_bulk(args.w_data + row * (args.k / 2) + th.step_begin * 64, static_cast<uint32_t>(ahead * 64));
    } else {
      const uint8_t* scales = args.w_scales + row * (args.k / Format::kBlock) + th.step_begin * Layout::ScaleRing::kStepBytes;
      for (int64_t b = 0; b < ahead * Layout::ScaleRing::kStepBytes; b += 32) prefetch_l2(scales + b);
    }
  }
#endif
  wait_for_primary_grid();
  let_dependents_launch();
  return count;
}

// The kernel for dense x: linear_kernel_begin, then linear_mma_cta.
template <class Format, typename XT, int kNt, bool kResident, bool kRowChunks = false>
__global__ void __launch_bounds__(256, (kLinearMinCtas<Format, XT, kNt, kResident>)) linear_mma_kernel(LinearArgs args) {
  using Layout = LinearLayout<Format, XT, kNt, kResident, kRowChunks>;
  extern __shared__ __align__(128) uint8_t smem[];
  LinearThread th;
  const int count = linear_kernel_begin<Layout>(args, th);
  linear_mma_cta<Layout>(args, th, count, smem);
}

// Ranges whose partials the reduction kernels load before they add them.
constexpr int kLinearReduceBatch = 8;

// Output e's K range partials added in range order. Each batch of ranges' loads is issued before
// its adds, so that they wait on memory together: a plain loop over the run-time range count
// compiles to loads that wait for the adds before them, one more trip to L2 for every few ranges,
// and at decode rows that trip is most of the reduction's time. Not shared with
// linear_reduce4_kernel's loop: as one template for both, ptxas left three of that kernel's eight
// 16-byte loads behind its first adds.
__device__ __forceinline__ float linear_range_sum(const LinearArgs& args, int64_t total, int64_t e) {
  float sum = args.partials[e];
  for (int s0 = 1; s0 < args.splits; s0 += kLinearReduceBatch) {
    float batch[kLinearReduceBatch];
#pragma unroll
    for (int b = 0; b < kLinearReduceBatch; ++b) {
      if (s0 + b < args.splits) batch[b] = args.partials[(s0 + b) * total + e];
    }
#pragma unroll
    for (int b = 0; b < kLinearReduceBatch; ++b) {
      if (s0 + b < args.splits) sum = __fadd_rn(sum, batch[b]);
    }
  }
  return sum;
}

// The K ranges' sums (linear_range_sum), then linear_store, with the global scales and the first
// output's bias element read before the dependency wait (linear_global_scales says why), later
// outputs' bias before their partials. Runs as the programmatic dependent of linear_mma_kernel
// (launch_dependent), so it waits for that kernel's writes first. The first output is peeled off
// the loop: with the loop choosing between the early bias and a later one, ptxas issued the last
// load of each batch after the first add.
__global__ void __launch_bounds__(256) linear_reduce_kernel(LinearArgs args) {
  const int64_t total = args.m * args.n;
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const LinearGlobalScales scales = linear_global_scales(args);
  const bool has_bias = args.bias_type != LinearBias::kNone;  // no index division before the wait without one
  const float first_bias = has_bias && first < total ? linear_bias(args, first % args.n) : 0.0f;
  linear_dependent_start();  // the next layer may prefetch its weight meanwhile
  if (first >= total) return;
  linear_store(args, scales, first_bias, first / args.n, first % args.n, linear_range_sum(args, total, first));
  for (int64_t e = first + static_cast<int64_t>(gridDim.x) * blockDim.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float bias = linear_bias(args, e % args.n);
    linear_store(args, scales, bias, e / args.n, e % args.n, linear_range_sum(args, total, e));
  }
}

// linear_reduce_kernel four features a thread, for N % 4 == 0 (launch_reduce): 16-byte loads, one
// index division per four outputs, and each batch of ranges' loads issued before its adds, so
// that they are in flight together; the adds keep range order, so the sums are the same. The
// global scales and the first quad's bias are read before the wait, later quads' bias at their
// stores: with its four elements read after the wait, before the partials, ptxas left three of the
// eight loads behind the adds.
__global__ void __launch_bounds__(256) linear_reduce4_kernel(LinearArgs args) {
  const int64_t quads = args.m * args.n / 4;
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const LinearGlobalScales scales = linear_global_scales(args);
  float4 first_bias{};
  if (args.bias_type != LinearBias::kNone && first < quads) {  // no index division before the wait without one
    const int64_t feature = 4 * first % args.n;
    first_bias = {linear_bias(args, feature), linear_bias(args, feature + 1), linear_bias(args, feature + 2),
                  linear_bias(args, feature + 3)};
  }
  linear_dependent_start();
  const float4* partials = reinterpret_cast<const float4*>(args.partials);
  for (int64_t e = first; e < quads; e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float4 sum = partials[e];
    for (int s0 = 1; s0 < args.splits; s0 += kLinearReduceBatch) {
      float4 batch[kLinearReduceBatch];
#pragma unroll
      for (int b = 0; b < kLinearReduceBatch; ++b) {
        if (s0 + b < args.splits) batch[b] = partials[(s0 + b) * quads + e];
      }
#pragma unroll
      for (int b = 0; b < kLinearReduceBatch; ++b) {
        if (s0 + b < args.splits) {
          sum.x = __fadd_rn(sum.x, batch[b].x), sum.y = __fadd_rn(sum.y, batch[b].y);
          sum.z = __fadd_rn(sum.z, batch[b].z), sum.w = __fadd_rn(sum.w, batch[b].w);
        }
      }
    }
    const int64_t token = 4 * e / args.n, feature = 4 * e % args.n;
    const bool at_first = e == first;
    linear_store(args, scales, at_first ? first_bias.x : linear_bias(args, feature), token, feature, sum.x);
    linear_store(args, scales, at_first ? first_bias.y : linear_bias(args, feature + 1), token, feature + 1, sum.y);
    linear_store(args, scales, at_first ? first_bias.z : linear_bias(args, feature + 2), token, feature + 2, sum.z);
    linear_store(args, scales, at_first ? first_bias.w : linear_bias(args, feature + 3), token, feature + 3, sum.w);
  }
}

}  // namespace fp4ops::cuda
