// E2M1 codes decoded straight into mma.sync operand registers, and the mma.sync calls the
// tensor-core GEMV uses (fp16/bf16 m16n8k16, sm_80+; the E4M3 widening cvt needs sm_89+). Every
// decode is exact: the value in the register is the E2M1 value times a power of two
// (kDecodeExponent), which the GEMV folds back into its fp32 scale multiply.
//
// The decoders take one 32-bit word of packed codes (8 elements; element i in bits 4i..4i+3,
// sign in the top bit of each nibble) and return the registers in the order the k-slots of one
// or two MMAs consume them. Which element sits in which k-slot does not matter to a dot product
// as long as B is laid out the same way; the B stager (gemv_mma.cuh) uses the same pairing.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "../common/fp4_format.h"

namespace fp4ops::cuda {

// --- E4M3 bytes (the first step of the sm_90 fp16 decode) ------------------------------------
// E2M1 magnitude bits (e1 e0 m) placed at E4M3 bits 4..2 read as an E4M3 number with exponent
// field e and mantissa m00: exactly the E2M1 value times 2^-6 (code 1 becomes the E4M3 subnormal
// 2^-7). The sign moves to bit 7. `even` holds elements 0, 2, 4, 6 (one per byte), `odd` 1, 3, 5, 7.
struct E4m3x4Pair {
  uint32_t even, odd;
};
constexpr int kE4m3DecodeExponent = -6;
// The fp16 decode without the E4M3 cvt (e2m1x8_to_fp16) gives the values times 2^-14.
constexpr int kFp16BitsDecodeExponent = -14;

__device__ __forceinline__ E4m3x4Pair e2m1x8_to_e4m3(uint32_t w) {
  // even: low nibble of each byte; 4 * magnitude + 12 * (sign bit 3) lands sign on bit 7.
  const uint32_t even = (w & 0x07070707u) * 4u + (w & 0x08080808u) * 16u;
  // odd: high nibble; magnitude shifts down by 2, the sign is already on bit 7.
  const uint32_t odd = ((w >> 2) & 0x1C1C1C1Cu) | (w & 0x80808080u);
  return {even, odd};
}

// --- fp16 / bf16 operands (mma m16n8k16) ----------------------------------------------------
// Four registers of two 16-bit values each. MMA q (q = 0, 1) of the word takes registers
// {2q, 2q+1} as its A k-slots {2t..2t+1, 2t+8..2t+9}. Which elements share a register depends on
// the decoder (Pairing); element_for() gives the same pairing for B.
struct Regs4 {
  uint32_t reg[4];
};

enum class Pairing {
  kPlus4,    // register r = elements (r, r + 4): the bf16 decode (two nibbles 16 bits apart)
  kPlus2,    // registers = (0, 2), (1, 3), (4, 6), (5, 7): E4M3 bytes widened by cvt
  kNatural,  // register r = elements (2r, 2r + 1): the hardware E2M1 cvt, byte by byte
};

// fp16 with the E4M3 cvt (FP4OPS_HW_E4M3, arch.h): E4M3 bytes (value x 2^-6, see above) widened
// exactly by cvt.f16x2.e4m3x2, two per instruction, fewer instructions than shifts and masks. On
// Blackwell the hardware E2M1 cvt gives the exact value directly. Without either (sm_80/sm_86),
// shifts and masks place the magnitude bits (e1 e0 m) in fp16's exponent and mantissa: the
// value x 2^-14 exactly (code 1, 0.5, becomes the fp16 subnormal 2^-15, which the tensor cores
// take exactly).
__device__ __forceinline__ Regs4 e2m1x8_to_fp16(uint32_t w) {
  Regs4 out;
#if defined(FP4OPS_HW_FP4)
  asm("{\n\t.reg .b8 b0, b1, b2, b3;\n\t"
      "mov.b32 {b0, b1, b2, b3}, %4;\n\t"
      "cvt.rn.f16x2.e2m1x2 %0, b0;\n\t"
      "cvt.rn.f16x2.e2m1x2 %1, b1;\n\t"
      "cvt.rn.f16x2.e2m1x2 %2, b2;\n\t"
      "cvt.rn.f16x2.e2m1x2 %3, b3;\n\t}"
      : "=r"(out.reg[0]), "=r"(out.reg[1]), "=r"(out.reg[2]), "=r"(out.reg[3])
      : "r"(w));
#elif defined(FP4OPS_HW_E4M3)
  const E4m3x4Pair p = e2m1x8_to_e4m3(w);  // even = (0, 2, 4, 6), odd = (1, 3, 5, 7)
  asm("{\n\t.reg .b16 e0, e1, o0, o1;\n\t"
      "mov.b32 {e0, e1}, %4;\n\t"
      "mov.b32 {o0, o1}, %5;\n\t"
      "cvt.rn.f16x2.e4m3x2 %0, e0;\n\t"
      "cvt.rn.f16x2.e4m3x2 %1, o0;\n\t"
      "cvt.rn.f16x2.e4m3x2 %2, e1;\n\t"
      "cvt.rn.f16x2.e4m3x2 %3, o1;\n\t}"
      : "=r"(out.reg[0]), "=r"(out.reg[1]), "=r"(out.reg[2]), "=r"(out.reg[3])
      : "r"(p.even), "r"(p.odd));
#else
  // Register r = elements (r, r + 4) (nibbles r and r + 4, 16 bits apart): magnitude bits to fp16
  // bits 9..11, the sign to bit 15.
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const uint32_t nibbles = w >> (4 * r);
    out.reg[r] = (nibbles & 0x00070007u) << 9 | (nibbles & 0x00080008u) << 12;
  }
#endif
  return out;
}

// bf16: magnitude bits at 6..8 read as bf16 = value * 2^-126 (code 1 a bf16 subnormal).
// Register r holds elements (r, r + 4), nibbles 16 bits apart: masked to those two nibbles (moved
// down a byte first for r >= 2), one multiply places each nibble twice, magnitude at 6..8 and sign
// at 15 (x 2^6 + x 2^12 for nibble 0, x 2^2 + x 2^8 for nibble 1; the copies do not overlap, so
// nothing carries), and a mask keeps those bits: 3 instructions per register, 13 per word
// against 15 for a shift and mask per field (the bits are the same).
template <int r>
__device__ __forceinline__ uint32_t e2m1_pair_bf16_bits(uint32_t w) {
  const uint32_t src = r < 2 ? w : w >> 8;
  constexpr uint32_t kNibbles = r % 2 == 0 ? 0x000F000Fu : 0x00F000F0u;
  constexpr uint32_t kTwoCopies = r % 2 == 0 ? (1u << 6) + (1u << 12) : (1u << 2) + (1u << 8);
  return ((src & kNibbles) * kTwoCopies) & 0x81C081C0u;
}
constexpr int kBf16BitsDecodeExponent = -126;

// The values times 2^-126, as the bits above give them. The tensor cores take the subnormal
// (code 1) exactly; the GEMV feeds these where B is staged times 2^70 (gemv_mma.cuh), so that
// every product stays a normal fp32 number.
__device__ __forceinline__ Regs4 e2m1x8_to_bf16_bits(uint32_t w) {
  return {{e2m1_pair_bf16_bits<0>(w), e2m1_pair_bf16_bits<1>(w), e2m1_pair_bf16_bits<2>(w), e2m1_pair_bf16_bits<3>(w)}};
}

// The values themselves: one bf16x2 multiply per register by 2^126 (exact: a power of two,
// results 0.5 .. 6), 17 instructions per word. A factor that small could not be folded into the fp32 scale without
// underflowing the products of small B values.
__device__ __forceinline__ Regs4 e2m1x8_to_bf16(uint32_t w) {
  const Regs4 bits = e2m1x8_to_bf16_bits(w);
  Regs4 out;
  const __nv_bfloat162 two_pow_126 = __halves2bfloat162(__ushort_as_bfloat16(0x7E80u), __ushort_as_bfloat16(0x7E80u));
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const __nv_bfloat162 v = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&bits.reg[r]), two_pow_126);
    out.reg[r] = *reinterpret_cast<const uint32_t*>(&v);
  }
  return out;
}

// Per MMA element type: the A decoder, its power-of-two factor and its element pairing.
template <typename T>
struct DenseOperand;
template <>
struct DenseOperand<__half> {
#if defined(FP4OPS_HW_FP4)
  static constexpr Pairing kPairing = Pairing::kNatural;
  static constexpr int kDecodeExponent = 0;
#elif defined(FP4OPS_HW_E4M3)
  static constexpr Pairing kPairing = Pairing::kPlus2;
  static constexpr int kDecodeExponent = kE4m3DecodeExponent;
#else
  static constexpr Pairing kPairing = Pairing::kPlus4;
  static constexpr int kDecodeExponent = kFp16BitsDecodeExponent;
#endif
  static __device__ __forceinline__ Regs4 decode(uint32_t w) { return e2m1x8_to_fp16(w); }
};
template <>
struct DenseOperand<__nv_bfloat16> {
  static constexpr Pairing kPairing = Pairing::kPlus4;
  static constexpr int kDecodeExponent = 0;
  static __device__ __forceinline__ Regs4 decode(uint32_t w) { return e2m1x8_to_bf16(w); }
};

// The element of an 8-element group that register r holds in its low (half = 0) or high half.
__host__ __device__ constexpr int element_for(Pairing pairing, int r, int half) {
  switch (pairing) {
    case Pairing::kPlus4: return r + 4 * half;
    case Pairing::kPlus2: return (r / 2) * 4 + r % 2 + 2 * half;
    default: return 2 * r + half;
  }
}

// --- mma.sync wrappers: D = A * B + D, fp32 accumulators ------------------------------------
template <typename T>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

}  // namespace fp4ops::cuda
