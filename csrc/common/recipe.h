// The NVFP4 training-recipe options (docs/recipe.md), shared by the CPU and CUDA kernels so both
// compute the same bits: the 16-point Random Hadamard Transform in a fixed fp32 butterfly order,
// Philox4x32-10 random words, and stochastic E2M1 rounding from 8 random bits per element.
#pragma once

#include <cstdint>

#include "block_formats.h"

namespace fp4ops {

// Philox4x32-10's round keys for one seed: {k0, k1} of round i is the seed's halves plus i times
// the Weyl constants. Every block of a call uses the same keys, so they are computed once per call
// and the GPU kernels read them from their parameters: a block's ten rounds then carry no key
// additions, nor the moves those would need.
struct PhiloxKeys {
  uint32_t k0[10], k1[10];
};

FP4OPS_HD PhiloxKeys philox_keys(uint64_t seed) {
  PhiloxKeys keys;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    keys.k0[round] = k0;
    keys.k1[round] = k1;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return keys;
}

// The rotation's sign flips as XOR masks on 16-bit elements packed two per word: bit 15 / 31 of
// word j negates element 2j / 2j + 1 (all zero without a rotation). The GPU's per-block kernel
// flips 16-bit inputs this way, one XOR per two elements, before widening them to fp32; negating
// either the 16-bit value or its exact fp32 widening gives the same fp32 value.
struct SignWords {
  uint32_t w[8];
};

FP4OPS_HD SignWords hadamard_sign_words(int32_t hadamard_signs) {
  SignWords words{};
  if (hadamard_signs < 0) return words;
  const auto signs = static_cast<uint32_t>(hadamard_signs);
  for (int j = 0; j < 8; ++j) words.w[j] = ((signs >> (2 * j)) & 1u) << 15 | ((signs >> (2 * j + 1)) & 1u) << 31;
  return words;
}

// What a recipe quantize does besides plain 1D NVFP4 (all off = the plain quantizer's bits).
struct RecipeOptions {
  bool rowwise;           // blocks of 16 along K: x itself
  bool columnwise;        // blocks of 16 along the rows: x^T, stored transposed ([..., K, rows])
  bool block_2d;          // one scale per 16x16 tile, repeated for each of its rows / columns
  int32_t hadamard_signs; // -1: no rotation; else bit i set means sign s_i = -1
  // Stochastic E2M1 rounding from (seed, offset): the seed is needed only as its Philox round
  // keys, computed once per call.
  bool stochastic;
  uint64_t offset;
  PhiloxKeys keys;        // philox_keys(seed)
  SignWords sign_words;   // hadamard_sign_words(hadamard_signs)
};

// x' = x diag(S) H16 / 4 on one 16-element group, H16 the Sylvester Hadamard matrix
// (H16[i][j] = (-1)^popcount(i & j)). The butterfly runs its stages in the order h = 1, 2, 4, 8
// with fp32 additions only (nothing to contract into an FMA), and the exact sign flips and the
// final * 1/4 are the only other operations: every implementation rounds identically.
FP4OPS_HD void hadamard16(float (&v)[16], uint32_t signs) {
  for (int i = 0; i < 16; ++i) v[i] = (signs >> i) & 1u ? -v[i] : v[i];
  for (int h = 1; h < 16; h <<= 1) {
    for (int i = 0; i < 16; ++i) {
      if (i & h) continue;
      const float a = v[i];
      const float b = v[i + h];
      v[i] = add_rn(a, b);
      v[i + h] = sub_rn(a, b);
    }
  }
  for (int i = 0; i < 16; ++i) v[i] = mul_rn(v[i], 0.25f);
}

// Transformer Engine's fixed sign vector (reference.TE_RHT_SIGNS) as a sign mask: the default
// rotation, for which the CUDA rowwise kernel has a compile-time instance.
constexpr uint32_t kTeHadamardSigns = 0xD7E8;

// Philox4x32-10 (Salmon et al., SC'11): four 32-bit random words from a 128-bit counter and a
// 64-bit key. Counter of an output block: {block index low, block index high (bit 31: the
// columnwise output), offset low, offset high}; key: the seed.
struct Philox4 {
  uint32_t w[4];
};

FP4OPS_HD Philox4 philox4x32_10(uint64_t block, bool columnwise, uint64_t offset, const PhiloxKeys& keys) {
  uint32_t c0 = static_cast<uint32_t>(block), c1 = static_cast<uint32_t>(block >> 32) ^ (columnwise ? 0x80000000u : 0u);
  uint32_t c2 = static_cast<uint32_t>(offset), c3 = static_cast<uint32_t>(offset >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
    const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c0 = hi1 ^ c1 ^ keys.k0[round];
    c1 = lo1;
    c2 = hi0 ^ c3 ^ keys.k1[round];
    c3 = lo0;
  }
  return {{c0, c1, c2, c3}};
}

// Stochastic fp32 -> E2M1 with 8 random bits r (0..255): between the grid neighbours
// lo <= |y| < hi the top 8 bits of the position t = (|y| - lo) / (hi - lo) are added to r and the
// carry rounds away from zero, so P(hi) = floor(256 t) / 256 (the carry-out rule of PTX's .rs
// rounding, with 8 bits per element of an e2m1x4 conversion). |y| >= 6 and Inf saturate to 6;
// the sign bit of y is kept (as in the round-to-nearest encoder). NaN: the caller zeroes the codes.
//
// In fixed point, with position = 256 * code(lo) + floor(256 t), the code is (position + r) >> 8.
// From 1 up E2M1 has two grid points per binade, so the fp32 bits shifted right by 14 are exactly
// that position (exponent and top mantissa bit: the code; the next 8 bits: floor(256 t)), offset
// by 0xFC00 (1.0 -> 512, code 2). Below 1 the step is 0.5: position = floor(512 |y|), which the
// GPU gets from one round-toward-zero add (16384 + |y| keeps 9 fraction bits) instead of a
// float-to-int conversion, which issues at a lower rate than an add.
FP4OPS_HD uint32_t e2m1_encode_stochastic(float y, uint32_t r) {
  const uint32_t bits = float_to_bits(y);
  const float a = fminf(bits_to_float(bits & 0x7FFFFFFFu), kE2M1Max);
  uint32_t position;
  if (a >= 1.0f) {
    position = (float_to_bits(a) >> 14) - 0xFC00u;
  } else {
#if defined(__CUDA_ARCH__)
    position = float_to_bits(__fadd_rz(a, 16384.0f)) - 0x46800000u;  // 16384 = 0x46800000
#else
    position = static_cast<uint32_t>(mul_rn(a, 512.0f));  // exact product, truncated
#endif
  }
  return ((bits >> 28) & 0x8u) | ((position + (r & 0xFFu)) >> 8);
}

#if defined(__CUDA_ARCH__)
// e2m1_encode_stochastic for a pair, with its integer steps in 16-bit lanes (same codes; checked
// for every fp32 |y| by tools/check_sr_positions.py). Per element, a = |y| / 8 saturated at 1
// (FMUL.SAT; exact wherever the position is not 0, Inf -> 1) and s = max(a, RZ(a / 2 + 1/16)):
// from |y| = 1 up s = a, below it s = 1/16 + floor(|y| 2^23) 2^-27 (the add is exact before the
// round toward zero). Either way (bits(s) - bits(1/16)) >> 14 is the fixed-point position:
// bits(|y|) >> 14 - 0xFC00 from 1 up (the division by 8 moves only the exponent), floor(512 |y|)
// below, at most 0x800 (|y| >= 8). A lane adds the 8 random bits and clamps at 0x7FF, the
// saturation at 6: position 0x700 (|y| = 6) plus any random byte stays in 0x700..0x7FF, code 7,
// and so does every larger position. The sign reaches bit 11 through a byte permute that
// replicates each element's sign bit over its byte. The code nibble is the lane's bits 8..11.
// `random_lanes`: the even element's byte in bits 0..7, the odd one's in bits 16..23. Returns the
// nibbles in bytes 1 and 3 (e2m1x8_pack_lanes<1, 3>). Not for NaN (a finite x times the capped
// multiplier never is one). The saturating multiply, the clamp, the shift as IMAD.SHL and the
// sign permute take the place of two FMNMX per element and a shift per pair on the ALU pipe, the
// quantizers' busiest (docs/recipe.md, "Speed").
__device__ __forceinline__ uint32_t e2m1x2_stochastic_lanes(float even, float odd, uint32_t random_lanes) {
  const auto shifted_bits = [](float y) {
    const float a = __saturatef(fabsf(y) * 0.125f);
    return __float_as_uint(fmaxf(a, __fmaf_rz(a, 0.5f, 0.0625f))) << 2;
  };
  // Lanes: the top halves of 4 bits(s), each in 0xF600..0xFE00 (s in [1/16, 1]). Adding
  // 0x0A00 to each (-(4 bits(1/16)) >> 16) always carries exactly one out of the low lane, hence
  // 0x09FF in the high one.
  const uint32_t positions = __byte_perm(shifted_bits(even), shifted_bits(odd), 0x7632) + 0x09FF0A00u;
  // prmt's selector nibbles 0xB / 0xF: byte 3 of `even` / `odd` with its top bit replicated over
  // the byte (the nibble's msb selects that mode; written out because __byte_perm documents only
  // the low 3 bits).
  uint32_t sign_bytes;
  asm("prmt.b32 %0, %1, %2, 0xF0B0;" : "=r"(sign_bytes) : "r"(__float_as_uint(even)), "r"(__float_as_uint(odd)));
  return __vminu2(positions + random_lanes, 0x07FF07FFu) | (sign_bytes & 0x08000800u);
}
#endif

// The eight code bytes of one 16-element block encoded as `enc`, as two little-endian words
// (elements 0-7, 8-15): round-to-nearest, or (stochastic) element i takes byte i % 4 of word
// i / 4 of `random`. Words, not a byte array, and `random` by reference with a flag rather than
// a nullable pointer: the GPU then keeps both in registers, where a byte array read back as
// words, or a pointer, would put them in a stack frame (local-memory traffic on every block).
FP4OPS_HD void encode_block16(const float (&v)[16], const BlockEncoding& enc, bool stochastic, const Philox4& random,
                              uint32_t (&out)[2]) {
  if (!stochastic) {
    for (int w = 0; w < 2; ++w) out[w] = encode_element_octet(enc, v + 8 * w);
    return;
  }
  for (int w = 0; w < 2; ++w) {
#if defined(__CUDA_ARCH__)
    uint32_t lanes[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {  // pair i = 4w + j: bytes 2 (i % 2) and 2 (i % 2) + 1 of word i / 2
      const int i = 4 * w + j;
      const uint32_t random_lanes = __byte_perm(random.w[i / 2], 0u, i % 2 ? 0x4342 : 0x4140);
      lanes[j] = e2m1x2_stochastic_lanes(mul_rn(v[2 * i], enc.element_multiplier),
                                         mul_rn(v[2 * i + 1], enc.element_multiplier), random_lanes);
    }
    const uint32_t word = e2m1x8_pack_lanes<1, 3>(lanes[0], lanes[1], lanes[2], lanes[3]);
#else
    uint32_t word = 0;
    for (int j = 0; j < 4; ++j) {  // byte j of word w: elements 8w + 2j, 8w + 2j + 1
      const int i = 4 * w + j;
      const uint32_t bits = random.w[i / 2];
      const int shift = (i % 2) * 16;
      const uint32_t even = e2m1_encode_stochastic(mul_rn(v[2 * i], enc.element_multiplier), bits >> shift);
      const uint32_t odd = e2m1_encode_stochastic(mul_rn(v[2 * i + 1], enc.element_multiplier), bits >> (shift + 8));
      word |= (even | (odd << 4)) << (8 * j);
    }
#endif
    out[w] = enc.zero_codes ? 0u : word;
  }
}

}  // namespace fp4ops
