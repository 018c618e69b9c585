// Argument checks and outputs of the fused producers (SPEC 7), shared by the CPU and CUDA
// launchers. The Python wrappers (fp4ops/producers.py) check the same things first, in the same
// words.
#pragma once

#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "op_checks.h"

namespace fp4ops {

// What a producer quantizes into: the format (its block), MXFP4's scale rule, the scale layout.
struct ProducerTarget {
  bool nvfp4;
  Mxfp4ScaleRule rule;
  bool swizzled;

  int64_t block() const { return nvfp4 ? kNvfp4Block : kMxfp4Block; }
  const char* block_name() const { return nvfp4 ? "the NVFP4 block" : "the MXFP4 block"; }
};

// format, scale_rule, scale_layout and global_scale; x is the tensor the global scale must share
// a device with.
inline ProducerTarget parse_producer_target(const std::string& format, const std::optional<at::Tensor>& global_scale,
                                            const std::string& scale_rule, const std::string& scale_layout,
                                            const at::Tensor& x) {
  TORCH_CHECK(format == "nvfp4" || format == "mxfp4", "format: expected \"nvfp4\" or \"mxfp4\", got \"", format, "\"");
  const bool nvfp4 = format == "nvfp4";
  const Mxfp4ScaleRule rule = parse_scale_rule(scale_rule);
  TORCH_CHECK(!nvfp4 || rule == Mxfp4ScaleRule::kFloor,
              "scale_rule: \"rceil\" is an MXFP4 rule; NVFP4 block scales follow SPEC 2.3 (leave the default \"floor\")");
  const bool swizzled = parse_scale_layout(scale_layout);
  if (global_scale.has_value()) {
    TORCH_CHECK(nvfp4, "global_scale: MXFP4 has no global scale; pass None");
    check_global_scale(*global_scale, x, "x");
  }
  return {nvfp4, rule, swizzled};
}

inline void check_width_multiple(int64_t width, const ProducerTarget& target, const char* what) {
  TORCH_CHECK(width % target.block() == 0, "x: expected ", what, " to be a multiple of ", int_str(target.block()),
              " (", target.block_name(), "), got ", int_str(width));
}

// rms_norm_quantize: x [..., H]; weight [H]; residual like x; eps finite and >= 0.
inline void check_rms_norm_args(const at::Tensor& x, const at::Tensor& weight, double eps,
                                const std::optional<at::Tensor>& residual, const ProducerTarget& target) {
  check_float_input(x, "x");
  const int64_t hidden = x.size(-1);
  check_width_multiple(hidden, target, "the last dimension (the hidden size)");
  check_float_input(weight, "weight");
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == hidden, "weight: expected shape [", int_str(hidden),
              "] (x's last dimension), got ", shape_str(weight.sizes()));
  check_same_device(weight, "weight", x, "x");
  // SPEC 7 takes e = fp32(eps): finite there too. Doubles from FLT_MAX + half its ulp (2^103) up
  // round to fp32 infinity (the tie goes to the even 2^128), which would make every row's rs 0.
  constexpr double kFirstRoundingToInf = static_cast<double>(std::numeric_limits<float>::max()) + 0x1p103;
  TORCH_CHECK(std::isfinite(eps) && eps >= 0.0 && eps < kFirstRoundingToInf,
              "eps: expected a finite value >= 0 (finite in float32 too), got ", std::to_string(eps));
  if (residual.has_value()) {
    TORCH_CHECK(residual->scalar_type() == x.scalar_type(), "residual: expected ", x.scalar_type(),
                " (x's dtype), got ", residual->scalar_type());
    TORCH_CHECK(residual->sizes() == x.sizes(), "residual: expected shape ", shape_str(x.sizes()),
                " (x's shape), got ", shape_str(residual->sizes()));
    check_same_device(*residual, "residual", x, "x");
  }
}

// silu_mul_quantize: x [..., 2H], gate then up; H a multiple of the block.
inline void check_silu_mul_args(const at::Tensor& x, const ProducerTarget& target) {
  check_float_input(x, "x");
  TORCH_CHECK(x.size(-1) % 2 == 0, "x: expected an even last dimension (gate, then up), got ", int_str(x.size(-1)));
  check_width_multiple(x.size(-1) / 2, target, "half the last dimension (the gate and up width H)");
}

// The outputs a producer returns besides the codes and scales: fp32 g (0-dim; NVFP4) or an empty
// one (MXFP4), and an empty placeholder where an optional output is not asked for.
inline at::Tensor empty_placeholder(const at::Tensor& x, at::ScalarType dtype) {
  return at::empty({0}, x.options().dtype(dtype));
}

}  // namespace fp4ops
