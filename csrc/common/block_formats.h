// NVFP4 and MXFP4 as block-format policies (SPEC sections 2 and 3), shared by every kernel.
//
// A policy knows its block size, how a block's max magnitude becomes a scale code plus the
// multiplier applied to the elements, and how a scale code decodes back. Kernels are templates
// over the policy, so there is one kernel body per operation, not one per format.
#pragma once

#include <cfloat>

#include "fp4_format.h"

namespace fp4ops {

// How a block is encoded: its scale code, the factor each element is multiplied by before the
// E2M1 rounding, and whether the codes are forced to 0 (a block holding NaN/Inf, SPEC 2.5/3).
struct BlockEncoding {
  uint32_t scale_code;
  float element_multiplier;
  bool zero_codes;
};

// SPEC 2.2: a caller's global scale is usable when finite and > 0 (NaN fails the test).
FP4OPS_HD bool nvfp4_global_scale_is_valid(float g) { return g > 0.0f && g <= FLT_MAX; }

// SPEC 2.2: g = amax / 2688, or 1 when that is 0.
FP4OPS_HD float nvfp4_global_scale_from_amax(float amax) {
  const float g = div_rn(amax, kNvfp4GlobalDivisor);
  return g == 0.0f ? 1.0f : g;
}

struct Nvfp4Format {
  static constexpr int kBlock = kNvfp4Block;
  float global_scale;  // decode scale g

  // SPEC 2.3-2.5. An unusable g (a tensor argument is trusted, so it is checked here, on the
  // device, without a sync) makes the block scale NaN and, like a NaN block, all codes 0.
  FP4OPS_HD BlockEncoding encode(float block_max, bool block_is_finite) const {
    if (!block_is_finite || !nvfp4_global_scale_is_valid(global_scale)) return {kE4M3NaN, 0.0f, true};
    const uint32_t code = scale_code(block_max);
    return {code, element_multiplier(code), false};
  }

  // The two halves of encode() for a finite block and a usable g. scale_code gives 0..0x7E
  // (E4M3's cvt saturates an infinite quotient to 448), so element_multiplier takes 127 codes.
  FP4OPS_HD uint32_t scale_code(float block_max) const {
    return e4m3_encode(div_rn(div_rn(block_max, kE2M1Max), global_scale));
  }
  FP4OPS_HD float element_multiplier(uint32_t code) const {
    const float scale = e4m3_decode(code);
    if (scale == 0.0f) return 0.0f;
    const float multiplier = div_rn(1.0f, mul_rn(scale, global_scale));  // Inf when scale * g underflows
    return multiplier > FLT_MAX ? FLT_MAX : multiplier;
  }

  // SPEC 2.6: f = dec(sb) * g, once per block.
  FP4OPS_HD float decode_scale(uint32_t code) const { return mul_rn(e4m3_decode(code), global_scale); }
};

enum class Mxfp4ScaleRule : int { kFloor = 0, kRceil = 1 };

struct Mxfp4Format {
  static constexpr int kBlock = kMxfp4Block;
  Mxfp4ScaleRule rule;

  FP4OPS_HD BlockEncoding encode(float block_max, bool block_is_finite) const {
    if (!block_is_finite) return {kE8M0NaN, 0.0f, true};
    const uint32_t e = rule == Mxfp4ScaleRule::kFloor ? e8m0_scale_floor(block_max)
                                                      : e8m0_scale_rceil(block_max);
    return {e, exp2_int(127 - static_cast<int>(e)), false};  // exact: a power of two
  }

  FP4OPS_HD float decode_scale(uint32_t code) const { return e8m0_decode(code); }
};

// The word holding elements v[0..7] of a block encoded as `enc` (element i in nibble i). A finite
// x times a finite multiplier is never NaN and a block holding NaN/Inf has zero_codes set, so the
// NaN-free encoder applies; it runs unconditionally and a select keeps the GPU code free of
// branches.
FP4OPS_HD uint32_t encode_element_octet(const BlockEncoding& enc, const float* v) {
  float y[8];
  for (int i = 0; i < 8; ++i) y[i] = mul_rn(v[i], enc.element_multiplier);
  const uint32_t word = e2m1x8_encode_not_nan(y);
  return enc.zero_codes ? 0u : word;
}

}  // namespace fp4ops
