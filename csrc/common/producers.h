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
// is exact in fp32).
FP4OPS_HD float rms_inverse(float sum_of_squares, float hidden, float eps) {
  return div_rn(1.0f, sqrt_rn(add_rn(div_rn(sum_of_squares, hidden), eps)));
}

// SPEC 7 RMSNorm step 4: (h * rs) * w, normalized first, then weighted.
FP4OPS_HD float rms_normalized(float h, float rs, float w) { return mul_rn(mul_rn(h, rs), w); }

// The row length SPEC 7's tree is padded to (with zeros): the least power of two >= n.
inline int64_t next_power_of_two(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

// SPEC 7 RMSNorm step 2 on n = 2^k consecutive values (n >= 1): the squares, then pairs of
// neighbours added level by level. This is the contract's tree restricted to an aligned
// power-of-two range; ranges combine with one more addition per level. Overwrites v.
template <int N>
FP4OPS_HD float pairwise_sum_of_squares(float (&v)[N]) {
  static_assert(N > 0 && (N & (N - 1)) == 0, "a power of two");
  for (int i = 0; i < N; ++i) v[i] = mul_rn(v[i], v[i]);
  for (int width = N / 2; width >= 1; width /= 2) {
    for (int i = 0; i < width; ++i) v[i] = add_rn(v[2 * i], v[2 * i + 1]);
  }
  return v[0];
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
