#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <algorithm>

#include "../common/block_formats.h"
#include "../common/op_checks.h"
#include "kernels_cpu.h"

namespace fp4ops::cpu {

namespace {

// One block at a time: widen to fp32 (exact), reduce the finite max, encode scale and pairs.
template <typename scalar_t, class Format, class ScaleIndex>
void quantize_blocks(const scalar_t* x,     // [num_blocks * Format::kBlock]
                     int64_t num_blocks, const Format& format,
                     uint8_t* data,         // [num_blocks * Format::kBlock / 2] packed E2M1
                     uint8_t* scales,       // scale codes, block b at scale_index.offset(b)
                     const ScaleIndex& scale_index) {
  constexpr int kBlock = Format::kBlock;
  at::parallel_for(0, num_blocks, 1024, [&](int64_t begin, int64_t end) {
    float v[kBlock];
    for (int64_t b = begin; b < end; ++b) {
      const scalar_t* block = x + b * kBlock;
      float block_max = 0.0f;
      bool block_is_finite = true;
      for (int i = 0; i < kBlock; ++i) {
        v[i] = static_cast<float>(block[i]);
        block_is_finite &= is_finite_bits(float_to_bits(v[i]));
        block_max = std::max(block_max, finite_abs(v[i]));
      }
      const BlockEncoding enc = format.encode(block_max, block_is_finite);
      scales[scale_index.offset(b)] = static_cast<uint8_t>(enc.scale_code);
      uint8_t* out = data + b * (kBlock / 2);
      for (int i = 0; i < kBlock; i += 8) {
        const uint32_t word = encode_element_octet(enc, v + i);
        for (int b = 0; b < 4; ++b) out[i / 2 + b] = static_cast<uint8_t>(word >> (8 * b));
      }
    }
  });
}

template <class Format>
QuantizedOutputs quantize(const at::Tensor& x, const Format& format, at::ScalarType scale_dtype, bool swizzled) {
  QuantizedOutputs out = allocate_quantized(x, Format::kBlock, scale_dtype, swizzled);
  const at::Tensor input = x.contiguous();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "fp4ops_quantize_cpu", [&] {
    const auto run = [&](const auto& scale_index) {
      quantize_blocks(input.const_data_ptr<scalar_t>(), input.numel() / Format::kBlock, format,
                      out.data.mutable_data_ptr<uint8_t>(), static_cast<uint8_t*>(out.scales.data_ptr()), scale_index);
    };
    with_scale_index(swizzled, x.sizes(), x.size(-1) / Format::kBlock, run);
  });
  return out;
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> quantize_nvfp4(const at::Tensor& x,
                                                              const std::optional<at::Tensor>& global_scale,
                                                              const std::string& scale_layout) {
  check_float_input(x, "x");
  const bool swizzled = parse_scale_layout(scale_layout);
  check_last_dim_multiple(x, "x", kNvfp4Block);
  at::Tensor g;
  if (global_scale.has_value()) {
    check_global_scale(*global_scale, x, "x");
    g = global_scale->reshape({}).clone();
  } else {
    g = at::scalar_tensor(nvfp4_global_scale_from_amax(finite_amax(x)), x.options().dtype(at::kFloat));
  }
  const QuantizedOutputs out = quantize(x, Nvfp4Format{g.item<float>()}, at::kFloat8_e4m3fn, swizzled);
  return {out.data, out.scales, g};
}

std::tuple<at::Tensor, at::Tensor> quantize_mxfp4(const at::Tensor& x, const std::string& scale_rule,
                                                  const std::string& scale_layout) {
  check_float_input(x, "x");
  check_last_dim_multiple(x, "x", kMxfp4Block);
  const Mxfp4ScaleRule rule = parse_scale_rule(scale_rule);
  const QuantizedOutputs out = quantize(x, Mxfp4Format{rule}, at::kFloat8_e8m0fnu, parse_scale_layout(scale_layout));
  return {out.data, out.scales};
}

}  // namespace fp4ops::cpu
