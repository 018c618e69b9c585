// The one home of fp4ops' format math: E2M1 elements, E4M3 and E8M0 scales.
//
// Free of torch headers and, except the sm_90 SIMD helper, __host__ __device__, so the CPU and
// CUDA kernels share the same code. Each conversion has a software path (CPU; sm_90) and, where
// the chip has an instruction for it, a hardware path behind the same function. SPEC.md section 1
// is the contract; the tests hold every path to it bit for bit.
#pragma once

#include <cstdint>
#include <cstring>
#include <cmath>

#include "arch.h"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

#if defined(__CUDACC__)
#define FP4OPS_HD __host__ __device__ __forceinline__
#else
#define FP4OPS_HD inline
#endif

namespace fp4ops {

constexpr float kE2M1Max = 6.0f;
constexpr float kE4M3Max = 448.0f;
constexpr uint8_t kE4M3NaN = 0x7F;
constexpr uint8_t kE8M0NaN = 0xFF;
constexpr int kNvfp4Block = 16;
constexpr int kMxfp4Block = 32;
// 6 * 448: the NVFP4 global decode scale is amax / 2688 (SPEC 2.2).
constexpr float kNvfp4GlobalDivisor = 2688.0f;

// ---------------------------------------------------------------------------------------------
// Bit casts and exactly rounded arithmetic. The intrinsics pin the rounding on the device so the
// results never depend on -use_fast_math, -fmad or -prec-div; host code is built without
// fast-math and with contraction off (python/fp4ops/_build.py).
FP4OPS_HD uint32_t float_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
#endif
}

FP4OPS_HD float bits_to_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

FP4OPS_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

FP4OPS_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

FP4OPS_HD float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

FP4OPS_HD float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

FP4OPS_HD bool is_finite_bits(uint32_t u) { return (u & 0x7F800000u) != 0x7F800000u; }

// |x| for finite x, 0 for NaN/Inf: what the amax and block-max reductions take.
FP4OPS_HD float finite_abs(float x) {
  const uint32_t u = float_to_bits(x);
  return is_finite_bits(u) ? bits_to_float(u & 0x7FFFFFFFu) : 0.0f;
}

// 2^k as an fp32 for k in [-126, 127] (normal), without exp2_int's subnormal case.
FP4OPS_HD float exp2_normal(int k) { return bits_to_float(static_cast<uint32_t>(k + 127) << 23); }

// 2^k as an fp32 for k in [-127, 127] (2^-127 is the subnormal 0x00400000).
FP4OPS_HD float exp2_int(int k) {
  return k >= -126 ? bits_to_float(static_cast<uint32_t>(k + 127) << 23)
                   : bits_to_float(0x00400000u >> (-127 - k));
}

// ---------------------------------------------------------------------------------------------
// E2M1: magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 for codes 0..7; bit 3 is the sign.

// SPEC 1's rule as written: count the grid midpoints below |y|. Comparing the magnitude bits as
// integers is the same order as comparing the floats and makes NaN (bits above +Inf) count all
// seven thresholds, i.e. code 7, as the hardware does. Strict '>' at the midpoints whose lower
// neighbour has an even mantissa and '>=' where the upper one does is round-half-to-even.
FP4OPS_HD uint32_t e2m1_encode_by_thresholds(float y) {
  const uint32_t u = float_to_bits(y);
  const uint32_t a = u & 0x7FFFFFFFu;
  const uint32_t code = (a > 0x3E800000u)      // > 0.25
                        + (a >= 0x3F400000u)   // >= 0.75
                        + (a > 0x3FA00000u)    // > 1.25
                        + (a >= 0x3FE00000u)   // >= 1.75
                        + (a > 0x40200000u)    // > 2.5
                        + (a >= 0x40600000u)   // >= 3.5
                        + (a > 0x40A00000u);   // > 5.0
  const uint32_t sign = (a > 0x7F800000u) ? 0u : (u >> 28) & 0x8u;  // NaN drops its sign
  return code | sign;
}

#if defined(__CUDA_ARCH__) && !defined(FP4OPS_HW_FP4)
// The constants of steps 2 and 3 of e2m1x2_lanes_simd (below) in either 16-bit format T (bf16,
// or fp16 for values that are exact in fp16), both lanes alike, from its mantissa width m and
// exponent bias: 1, 6 = 1.5 x 2^2, the exponent field (also +Inf), and the magic's parts. The
// magic 2^(E + m - 1) with mantissa 2E is binade + (m - 1) in the exponent + 2E; binade >> (m - 1)
// is 2E + 2 x bias per lane (no bits cross lanes), so the sum's constant is (m - 1) << m minus
// 2 x bias (bf16: 0x0300 - 254 = 0x0202; fp16: 0x2400 - 30 = 0x23E2).
template <typename PairT, int kMantissaBits, uint32_t kBias>
struct E2m1LaneConstants {
  using Pair = PairT;
  static constexpr uint32_t kBothLanes = 0x00010001u;
  static constexpr uint32_t kOne = (kBias << kMantissaBits) * kBothLanes;
  static constexpr uint32_t kSix = (((kBias + 2) << kMantissaBits) | (1u << (kMantissaBits - 1))) * kBothLanes;
  static constexpr uint32_t kExponent = (0x7FFFu >> kMantissaBits << kMantissaBits) * kBothLanes;
  static constexpr uint32_t kInf = kExponent;
  static constexpr int kMagicShift = kMantissaBits - 1;
  static constexpr uint32_t kMagicOffset = ((kMantissaBits - 1u) << kMantissaBits) - 2 * kBias;  // per lane
};
template <typename T>
struct E2m1Lanes16;
template <>
struct E2m1Lanes16<__nv_bfloat16> : E2m1LaneConstants<__nv_bfloat162, 7, 127> {};
template <>
struct E2m1Lanes16<__half> : E2m1LaneConstants<__half2, 10, 15> {};
static_assert(E2m1Lanes16<__nv_bfloat16>::kSix == 0x40C040C0u && E2m1Lanes16<__half>::kSix == 0x46004600u);
static_assert(E2m1Lanes16<__nv_bfloat16>::kExponent == 0x7F807F80u && E2m1Lanes16<__half>::kExponent == 0x7C007C00u);

template <typename T>
__device__ __forceinline__ typename E2m1Lanes16<T>::Pair bits_as_pair(uint32_t bits) {
  return *reinterpret_cast<const typename E2m1Lanes16<T>::Pair*>(&bits);
}
template <typename Pair>
__device__ __forceinline__ uint32_t pair_as_bits(Pair v) {
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Steps 2 and 3 for two magnitudes that are already T (`magnitudes`: [odd : even] lanes, sign
// bits clear, exact or rounded to odd), with the signs taken from bits 15 and 31 of `signs`.
// Returns the lanes as e2m1x2_lanes_simd does.
template <typename T, bool kNibblesOnly>
__device__ __forceinline__ uint32_t e2m1x2_lanes_of_16bit(uint32_t magnitudes, uint32_t signs) {
  using C = E2m1Lanes16<T>;
  const auto r = __hmin2(bits_as_pair<T>(magnitudes), bits_as_pair<T>(C::kSix));     // <= 6
  const uint32_t binade = pair_as_bits(__hmax2(r, bits_as_pair<T>(C::kOne))) & C::kExponent;  // 2^E
  const uint32_t magic = binade + (binade >> C::kMagicShift) + C::kMagicOffset * C::kBothLanes;
  const uint32_t sum = pair_as_bits(__hadd2(r, bits_as_pair<T>(magic)));
  // Per lane: the code in bits 0..2 (the sum's mantissa, at most 7, so bit 3 is 0) and the sign
  // in bit 3.
  if constexpr (kNibblesOnly) {
    uint32_t lanes;  // (sum & ~0x00080008) | ((signs >> 12) & 0x00080008): one lop3 (e2m1x8_pack_lanes)
    asm("lop3.b32 %0, %1, %2, 0xFFF7FFF7, 0xE4;" : "=r"(lanes) : "r"(sum), "r"(signs >> 12));
    return lanes;
  } else {
    return (sum & 0x00070007u) | ((signs >> 12) & 0x00080008u);
  }
}

// Round to nearest even on the E2M1 grid for a pair, on a GPU without FP4 instructions (sm_90),
// in bf16x2 SIMD: a few packed operations per pair instead of counting the midpoints below |y|
// (SPEC 1's rule as written: 7 compares and their sums per element). Steps, per 16-bit lane:
//  1. r = |y| cut to bf16 with the lowest bit set when anything nonzero was cut ("round to
//     odd"). r has 8 significant bits; rounding it to E2M1's 2 gives the same result as
//     rounding |y| itself, because round-to-odd with at least two spare bits never creates or
//     hides a tie.
//  2. Saturate at 6, and take the binade 2^E of max(r, 1): E2M1's spacing is 2^(E-1) for
//     E = 0, 1, 2 (0.5 below 2, 1 below 4, 2 above).
//  3. One bf16 add of magic = 2^(E+6) (whose ulp is 2^(E-1)) rounds r to the grid, half to
//     even: the sum's low mantissa bits count grid steps k. Seeding the magic's mantissa with 2E
//     turns the count into the code, k + 2E (E = 0: 0..4; E = 1: 2..4 -> codes 4..6; E = 2:
//     2, 3 -> codes 6, 7), and its parity is k's, so the add's tie-to-even is E2M1's.
// Returns the two codes as lanes: `even`'s nibble in bits 0..3, `odd`'s in bits 16..19, zero
// above them; with kNibblesOnly, bits 4..15 and 20..31 are left as they fall (the sum's exponent:
// one LOP3 per pair fewer, for e2m1x8_pack_lanes, which reads only the nibbles). Not for NaN (Inf
// saturates to 6).
template <bool kNibblesOnly = false>
__device__ __forceinline__ uint32_t e2m1x2_lanes_simd(float even, float odd) {
  const uint32_t e = __float_as_uint(even), o = __float_as_uint(odd);
  const uint32_t top = __byte_perm(e, o, 0x7632);     // [odd bits 31..16 : even bits 31..16]
  const uint32_t bottom = __byte_perm(e, o, 0x5410);  // [odd bits 15..0 : even bits 15..0]
  const uint32_t round_to_odd = (top & 0x7FFF7FFFu) | __vminu2(bottom, 0x00010001u);
  return e2m1x2_lanes_of_16bit<__nv_bfloat16, kNibblesOnly>(round_to_odd, top);
}

__device__ __forceinline__ uint32_t e2m1x2_encode_simd(float even, float odd) {
  const uint32_t lanes = e2m1x2_lanes_simd(even, odd);
  return (lanes | (lanes >> 12)) & 0xFFu;  // both nibbles in one byte
}

#endif

#if defined(__CUDA_ARCH__)
// Four pairs' lanes into one word, pair j in byte j. Each lane word holds a pair's two code
// nibbles in the low halves of bytes kEven and kOdd (the high halves are ignored):
// e2m1x2_lanes_simd's in bytes 0 and 2, the stochastic encoder's (recipe.h) in bytes 1 and 3.
// Byte moves gather [pair 0 even, pair 1 even, pair 0 odd, pair 1 odd] into bytes 0..3, and one
// bit select (LOP3) takes the even nibbles from p and the odd ones from p >> 12 (bits
// 16..19 -> 4..7, 24..27 -> 12..15). Five instructions for four pairs.
template <int kEven = 0, int kOdd = 2>
__device__ __forceinline__ uint32_t e2m1x8_pack_lanes(uint32_t l0, uint32_t l1, uint32_t l2, uint32_t l3) {
  constexpr uint32_t kGather = kEven | (kEven + 4) << 4 | kOdd << 8 | (kOdd + 4) << 12;
  const uint32_t p01 = __byte_perm(l0, l1, kGather);
  const uint32_t p23 = __byte_perm(l2, l3, kGather);
  // (p & 0x0F0F0F0F) | ((p >> 12) & ~0x0F0F0F0F) as one lop3 (lookup table 0xE4 = (a & c) | (b & ~c)):
  // written in C++, the compiler narrows the second mask to the bytes the final permute keeps and
  // then needs two LOP3s.
  const auto select = [](uint32_t p) {
    uint32_t out;
    asm("lop3.b32 %0, %1, %2, 0x0F0F0F0F, 0xE4;" : "=r"(out) : "r"(p), "r"(p >> 12));
    return out;
  };
  return __byte_perm(select(p01), select(p23), 0x5410);
}
#endif

#if defined(__CUDA_ARCH__) && !defined(FP4OPS_HW_FP4)
// Eight values that are exact in T (bf16 or fp16) as four packed pairs (element 2j in word j's
// low half, 2j + 1 in its high half) into one word of codes, element i in nibble i, without FP4
// instructions. Exact values need no round-to-odd step (e2m1x2_lanes_simd's step 1: two byte
// permutes, a vminu2 and a merge per pair); sm_90 takes the |.| as an HFMA2, on the FMA pipe. Not
// for NaN; e2m1x8_encode_16bit below takes any value.
template <typename T>
__device__ __forceinline__ uint32_t e2m1x8_encode_16bit_not_nan(const uint32_t (&pairs)[4]) {
  constexpr bool kNibblesOnly = true;
  uint32_t lanes[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t magnitudes = pair_as_bits(__habs2(bits_as_pair<T>(pairs[j])));
    lanes[j] = e2m1x2_lanes_of_16bit<T, kNibblesOnly>(magnitudes, pairs[j]);
  }
  return e2m1x8_pack_lanes(lanes[0], lanes[1], lanes[2], lanes[3]);
}

// The same for any values, NaN included: min(x, +Inf) is x except that NaN gives +Inf (min returns
// the operand that is not NaN), so a NaN of either sign is code 7, as SPEC 1 asks.
template <typename T>
__device__ __forceinline__ uint32_t e2m1x8_encode_16bit(const uint32_t (&pairs)[4]) {
  uint32_t no_nan[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) no_nan[j] = pair_as_bits(__hmin2(bits_as_pair<T>(pairs[j]), bits_as_pair<T>(E2m1Lanes16<T>::kInf)));
  return e2m1x8_encode_16bit_not_nan<T>(no_nan);
}
#endif

// Two elements into one byte: `even` in the low nibble, `odd` in the high nibble (SPEC 1), for
// inputs that are not NaN (the quantizers never pass one: a block holding NaN encodes as zeros).
FP4OPS_HD uint32_t e2m1x2_encode_not_nan(float even, float odd) {
#if defined(FP4OPS_HW_FP4)
  uint32_t out;
  asm("{\n\t.reg .b8 pair;\n\t"
      "cvt.rn.satfinite.e2m1x2.f32 pair, %1, %2;\n\t"
      "cvt.u32.u8 %0, pair;\n\t}"
      : "=r"(out)
      : "f"(odd), "f"(even));
  return out;
#elif defined(__CUDA_ARCH__)
  return e2m1x2_encode_simd(even, odd);
#else
  return e2m1_encode_by_thresholds(even) | (e2m1_encode_by_thresholds(odd) << 4);
#endif
}

// Eight elements into one word, element i in nibble i (bytes in memory order), not NaN.
FP4OPS_HD uint32_t e2m1x8_encode_not_nan(const float (&v)[8]) {
#if defined(__CUDA_ARCH__) && !defined(FP4OPS_HW_FP4)
  constexpr bool kNibblesOnly = true;
  return e2m1x8_pack_lanes(e2m1x2_lanes_simd<kNibblesOnly>(v[0], v[1]), e2m1x2_lanes_simd<kNibblesOnly>(v[2], v[3]),
                           e2m1x2_lanes_simd<kNibblesOnly>(v[4], v[5]), e2m1x2_lanes_simd<kNibblesOnly>(v[6], v[7]));
#else
  uint32_t word = 0;
  for (int j = 0; j < 4; ++j) word |= e2m1x2_encode_not_nan(v[2 * j], v[2 * j + 1]) << (8 * j);
  return word;
#endif
}

// The same for every input: NaN of either sign gives code 7 (the hardware cvt does so itself).
FP4OPS_HD uint32_t e2m1x2_encode(float even, float odd) {
  uint32_t byte = e2m1x2_encode_not_nan(even, odd);
#if !defined(FP4OPS_HW_FP4)
  if (even != even) byte = (byte & 0xF0u) | 0x07u;
  if (odd != odd) byte = (byte & 0x0Fu) | 0x70u;
#endif
  return byte;
}

// Decode one code exactly. The three magnitude bits placed at fp32 bits 24..22 read as
// 2^(e-127) * (1 + m/2) (or m * 2^-127 for e = 0), which is the E2M1 value times 2^-126.
FP4OPS_HD float e2m1_decode(uint32_t code) {
#if defined(__CUDA_ARCH__)
  const float magnitude = bits_to_float((code & 0x7u) << 22) * 0x1p126f;
#else
  // The CPU reads the magnitude from a table instead: for code 1 (0.5) the multiply above takes a
  // subnormal operand, which x86 cores handle in microcode, tens of times slower than the table.
  constexpr float kMagnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float magnitude = kMagnitudes[code & 0x7u];
#endif
  return bits_to_float(float_to_bits(magnitude) | ((code & 0x8u) << 28));
}

struct Float2 {
  float even, odd;
};

// Decode the two elements of one byte.
FP4OPS_HD Float2 e2m1x2_decode(uint32_t byte) {
#if defined(FP4OPS_HW_FP4)
  uint32_t halves;
  asm("{\n\t.reg .b8 pair;\n\t"
      "cvt.u8.u32 pair, %1;\n\t"
      "cvt.rn.f16x2.e2m1x2 %0, pair;\n\t}"
      : "=r"(halves)
      : "r"(byte & 0xFFu));
  const __half2 h = *reinterpret_cast<const __half2*>(&halves);
  return {__low2float(h), __high2float(h)};
#else
  return {e2m1_decode(byte & 0xFu), e2m1_decode((byte >> 4) & 0xFu)};
#endif
}

// ---------------------------------------------------------------------------------------------
// E4M3 (float8_e4m3fn): bias 7, no infinities, 0x7F/0xFF NaN, max 448, subnormal step 2^-9.

// Round to nearest even, saturate finite overflow and Inf to +-448, NaN -> 0x7F.
FP4OPS_HD uint32_t e4m3_encode_sw(float x) {
  const uint32_t u = float_to_bits(x);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return kE4M3NaN;
  if (a >= 0x43E00000u) return sign | 0x7Eu;  // >= 448 (and Inf): everything rounds or saturates to 448
  if (a < 0x3C800000u) {
    // Below 2^-6 the grid is uniform, k * 2^-9: scaling by 2^9 is exact, rintf rounds half to
    // even, and k = 8 is exactly the smallest normal's code 0x08.
    return sign | static_cast<uint32_t>(rintf(bits_to_float(a) * 512.0f));
  }
  // Normal: rebias the exponent (127 -> 7) and round the 23-bit mantissa to 3 bits; a carry out
  // of the mantissa correctly bumps the exponent.
  const uint32_t exponent = (a >> 23) - 120u;
  const uint32_t mantissa = a & 0x7FFFFFu;
  uint32_t code = (exponent << 3) | (mantissa >> 20);
  const uint32_t rest = mantissa & 0xFFFFFu;
  code += (rest > 0x80000u) || (rest == 0x80000u && (code & 1u));
  return sign | code;
}

FP4OPS_HD uint32_t e4m3_encode(float x) {
#if defined(FP4OPS_HW_E4M3)
  uint32_t out;
  asm("{\n\t.reg .b16 pair;\n\t"
      "cvt.rn.satfinite.e4m3x2.f32 pair, 0f00000000, %1;\n\t"
      "cvt.u32.u16 %0, pair;\n\t}"
      : "=r"(out)
      : "f"(x));
  return out & 0xFFu;
#else
  return e4m3_encode_sw(x);
#endif
}

// Exact decode: the 7 magnitude bits at fp32 bits 26..20 read as the E4M3 value times 2^-120
// (subnormals included), so one multiply by 2^120 restores it.
FP4OPS_HD float e4m3_decode(uint32_t code) {
  if ((code & 0x7Fu) == 0x7Fu) return bits_to_float(0x7FC00000u);
  const float magnitude = bits_to_float((code & 0x7Fu) << 20) * 0x1p120f;
  return bits_to_float(float_to_bits(magnitude) | ((code & 0x80u) << 24));
}

// ---------------------------------------------------------------------------------------------
// E8M0 (float8_e8m0fnu): 2^(E-127), E = 0..254; 0xFF is NaN; code 0 is 2^-127, never 0.
FP4OPS_HD float e8m0_decode(uint32_t code) {
  if (code == kE8M0NaN) return bits_to_float(0x7FC00000u);
  return exp2_int(static_cast<int>(code) - 127);
}

// 2^(ea - 127) * 2^(eb - 127) * 2^undo for E8M0 codes ea, eb as two normal powers of two, the
// exponents added as integers (so a huge A scale times a tiny B scale cannot overflow or underflow
// on the way): `first` is at least 2^-100, so d * first is exact for the d that scale_by_e8m0_pair
// takes (a multiple of 2^-30 of magnitude 0 or at most 2^11: a multiple of 2^-130, which fp32's
// subnormals hold too), and `second` carries the rest, the one rounding. Past 2^254 the product
// overflows, below 2^-226 it rounds to zero, whichever factors carry the rest: the clamps change
// no result. No branches: the GEMV's hot loop runs this per block.
struct E8m0PairFactors {
  float first, second;
};
FP4OPS_HD E8m0PairFactors e8m0_pair_factors(uint32_t ea, uint32_t eb, int undo) {
  const int sum = static_cast<int>(ea + eb) - 254 + undo;
  const int first = sum < -100 ? -100 : (sum > 127 ? 127 : sum);
  const int rest = sum - first;
  const int second = rest < -126 ? -126 : (rest > 127 ? 127 : rest);
  return {exp2_normal(first), exp2_normal(second)};
}

// d * 2^(ea - 127) * 2^(eb - 127) * 2^undo for E8M0 codes ea, eb (0xFF: NaN) with one rounding
// wherever the result is normal (e8m0_pair_factors). d is 0 or at most 2^11 in magnitude and a
// multiple of 2^-30: a GEMV block sum of E2M1 products (a multiple of 1/4), possibly times the
// 2^-12 or 2^-28 of an exact operand encoding (mma_fragments.cuh).
FP4OPS_HD float scale_by_e8m0_pair(float d, uint32_t ea, uint32_t eb, int undo) {
  const E8m0PairFactors f = e8m0_pair_factors(ea, eb, undo);
  const float scaled = mul_rn(mul_rn(d, f.first), f.second);
  return ea == kE8M0NaN || eb == kE8M0NaN ? bits_to_float(0x7FC00000u) : scaled;
}

// MXFP4 "floor" rule (OCP MX): E = max(exponent_field(bmax) - 2, 0); bmax is finite, >= 0.
FP4OPS_HD uint32_t e8m0_scale_floor(float bmax) {
  const int field = static_cast<int>(float_to_bits(bmax) >> 23);
  return field > 2 ? static_cast<uint32_t>(field - 2) : 0u;
}

// MXFP4 "rceil" rule: E = clamp(ceil(log2(t)) + 127, 0, 254) with t = RN(bmax / 6), E = 0 when
// t == 0. For bmax >= 2^-123 (t normal) the rounded quotient has the same ceil(log2) as the exact
// one: t <= 2^k <=> bmax <= 6 * 2^k, because the next float above 6 * 2^k divided by 6 clears the
// rounding midpoint above 2^k. With bmax = M * 2^(field - 127) and bmax / 6 = (M / 1.5) *
// 2^(field - 129), that gives E = field - 2, plus 1 when M > 1.5; no division on the common path.
// Tinier maxima take the division: there t can be subnormal and round coarser than bmax.
FP4OPS_HD uint32_t e8m0_scale_rceil(float bmax) {
  const uint32_t b = float_to_bits(bmax);
  const uint32_t field = b >> 23;
  if (field >= 4) {
    const uint32_t biased = field - 2 + ((b & 0x7FFFFFu) > 0x400000u);
    return biased < 254u ? biased : 254u;
  }
  const uint32_t t = float_to_bits(div_rn(bmax, kE2M1Max));
  if (t == 0) return 0;
  // t < 2^-123 / 6 < 2^-125: ceil(log2 t) + 127 is at most 2 here, and 0 below 2^-127.
  const uint32_t t_field = t >> 23;
  const uint32_t t_mantissa = t & 0x7FFFFFu;
  if (t_field == 0) return t_mantissa > 0x400000u ? 1u : 0u;  // t in (2^-127, 2^-126) -> E = 1
  return t_field + (t_mantissa != 0);
}

}  // namespace fp4ops
