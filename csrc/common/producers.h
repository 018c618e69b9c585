// The fused producers' fp32 intermediates (SPEC 7): RMSNorm and SiLU-and-mul, torch-free and
// __host__ __device__, so the CPU and CUDA kernels compute them with the same operations. The
// quantization that follows is block_formats.h's, unchanged: a fused result is the plain
// quantizer applied to these values.
#pragma once

#include <cmath>
#include <cstdint>

#include "fp4_format.h"

namespace fp4ops {

FP4OPS_HD float sqrt_rn(float a) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

// SPEC 7 RMSNorm step 3: rs = 1 / sqrt(ss / H + e), each operation correctly rounded (H < 2^24
// is exact in fp32). Where H is a power of two 2^k, ss * 2^-k is the same quotient: 2^-k is exact,
// so both round the one real number ss / H once (a subnormal result included); on the GPU the
// multiply is a much shorter dependent chain than the division. 2^-k's bits are 0x7F000000 minus
// H's (biased exponents 127 + k and 127 - k).
FP4OPS_HD float rms_inverse(float sum_of_squares, float hidden, float eps) {
  const uint32_t hidden_bits = float_to_bits(hidden);
  const float mean = (hidden_bits & 0x007FFFFFu) == 0 ? mul_rn(sum_of_squares, bits_to_float(0x7F000000u - hidden_bits))
                                                      : div_rn(sum_of_squares, hidden);
  return div_rn(1.0f, sqrt_rn(add_rn(mean, eps)));
}

// SPEC 7 RMSNorm step 4: (h * rs) * w, normalized first, then weighted.
FP4OPS_HD float rms_normalized(float h, float rs, float w) { return mul_rn(mul_rn(h, rs), w); }

// The row length SPEC 7's tree is padded to (with zeros): the least power of two >= n.
inline int64_t next_power_of_two(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

// SPEC 7 RMSNorm step 2 on n = 2^k consecutive values (n >= 1): the squares
// (pairwise_sum_of_squares), then pairs of neighbours added level by level (pairwise_sum). This is
// the contract's tree restricted to an aligned power-of-two range; ranges combine with one more
// addition per level. Overwrites v.
template <int N>
FP4OPS_HD float pairwise_sum(float (&v)[N]) {
  static_assert(N > 0 && (N & (N - 1)) == 0, "a power of two");
  for (int width = N / 2; width >= 1; width /= 2) {
    for (int i = 0; i < width; ++i) v[i] = add_rn(v[2 * i], v[2 * i + 1]);
  }
  return v[0];
}
template <int N>
FP4OPS_HD float pairwise_sum_of_squares(float (&v)[N]) {
  for (int i = 0; i < N; ++i) v[i] = mul_rn(v[i], v[i]);
  return pairwise_sum(v);
}

// SPEC 7 SiLU-and-mul: (g / (1 + exp(-g))) * u with the platform's fp32 exp (the only step the
// contract leaves to the platform: CUDA's expf and the C library's differ in the last bits).
FP4OPS_HD float silu_mul(float gate, float up) {
#if defined(__CUDA_ARCH__)
  const float e = expf(-gate);
#else
  const float e = std::exp(-gate);
#endif
  return mul_rn(div_rn(gate, add_rn(1.0f, e)), up);
}

}  // namespace fp4ops
