// swizzle_scales / unswizzle_scales on the CPU: linear <-> the 128x4 atom layout (SPEC 4).
#include <ATen/Parallel.h>

#include "../common/op_checks.h"
#include "kernels_cpu.h"

namespace fp4ops::cpu {

at::Tensor swizzle_scales(const at::Tensor& scales) {
  check_scale_codes(scales, "scales", 1);
  const int64_t cols = scales.size(-1);
  // Zeroed first: only real scales are copied, so every padding byte is 0.
  at::Tensor out = at::zeros(scale_shape(scales.sizes(), cols, true), scales.options());
  const at::Tensor in = scales.contiguous();
  const uint8_t* src = static_cast<const uint8_t*>(in.const_data_ptr());
  uint8_t* dst = static_cast<uint8_t*>(out.mutable_data_ptr());
  const SwizzledScales index = swizzled_scales_for(scales.sizes(), cols);
  at::parallel_for(0, in.numel(), 1 << 14, [&](int64_t begin, int64_t end) {
    for (int64_t s = begin; s < end; ++s) dst[index.offset(s)] = src[s];
  });
  return out;
}

at::Tensor unswizzle_scales(const at::Tensor& scales, int64_t rows, int64_t cols) {
  const auto linear = check_unswizzle_args(scales, rows, cols);
  at::Tensor out = at::empty(linear, scales.options());
  const at::Tensor in = scales.contiguous();
  const uint8_t* src = static_cast<const uint8_t*>(in.const_data_ptr());
  uint8_t* dst = static_cast<uint8_t*>(out.mutable_data_ptr());
  const SwizzledScales index = swizzled_scales_for(linear, cols);
  at::parallel_for(0, out.numel(), 1 << 14, [&](int64_t begin, int64_t end) {
    for (int64_t s = begin; s < end; ++s) dst[s] = src[index.offset(s)];
  });
  return out;
}

}  // namespace fp4ops::cpu
