#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include "../common/block_formats.h"
#include "../common/op_checks.h"
#include "kernels_cpu.h"

namespace fp4ops::cpu {

namespace {

// SPEC 2.6 / 3: f = decoded block scale, v = E2M1(code) * f in fp32, one rounding to the output.
template <typename out_t, class Format, class ScaleIndex>
void dequantize_blocks(const uint8_t* data,    // [num_blocks * Format::kBlock / 2] packed E2M1
                       const uint8_t* scales,  // scale codes, block b at scale_index.offset(b)
                       int64_t num_blocks, const Format& format, const ScaleIndex& scale_index,
                       out_t* out) {           // [num_blocks * Format::kBlock]
  constexpr int kBlock = Format::kBlock;
  at::parallel_for(0, num_blocks, 1024, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const float factor = format.decode_scale(scales[scale_index.offset(b)]);
      const uint8_t* in = data + b * (kBlock / 2);
      out_t* o = out + b * kBlock;
      for (int i = 0; i < kBlock / 2; ++i) {
        const Float2 pair = e2m1x2_decode(in[i]);
        o[2 * i] = static_cast<out_t>(mul_rn(pair.even, factor));
        o[2 * i + 1] = static_cast<out_t>(mul_rn(pair.odd, factor));
      }
    }
  });
}

template <class Format>
at::Tensor dequantize(const at::Tensor& data, const at::Tensor& scales, const Format& format,
                      at::ScalarType dtype, bool swizzled) {
  at::Tensor out = at::empty(with_last_dim(data, data.size(-1) * 2), data.options().dtype(dtype));
  const at::Tensor packed = data.contiguous();
  const at::Tensor codes = scales.contiguous();
  const int64_t num_blocks = out.numel() / Format::kBlock;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "fp4ops_dequantize_cpu", [&] {
    const auto run = [&](const auto& scale_index) {
      dequantize_blocks(packed.const_data_ptr<uint8_t>(), static_cast<const uint8_t*>(codes.const_data_ptr()),
                        num_blocks, format, scale_index, out.mutable_data_ptr<scalar_t>());
    };
    with_scale_index(swizzled, out.sizes(), out.size(-1) / Format::kBlock, run);
  });
  return out;
}

}  // namespace

at::Tensor dequantize_nvfp4(const at::Tensor& data, const at::Tensor& scales, const at::Tensor& global_scale,
                            at::ScalarType dtype, const std::string& scale_layout) {
  const bool swizzled = parse_scale_layout(scale_layout);
  check_dequantize_args(data, scales, at::kFloat8_e4m3fn, kNvfp4Block, dtype, swizzled);
  check_global_scale(global_scale, data, "data");
  return dequantize(data, scales, Nvfp4Format{global_scale.item<float>()}, dtype, swizzled);
}

at::Tensor dequantize_mxfp4(const at::Tensor& data, const at::Tensor& scales, at::ScalarType dtype,
                            const std::string& scale_layout) {
  const bool swizzled = parse_scale_layout(scale_layout);
  check_dequantize_args(data, scales, at::kFloat8_e8m0fnu, kMxfp4Block, dtype, swizzled);
  return dequantize(data, scales, Mxfp4Format{Mxfp4ScaleRule::kFloor}, dtype, swizzled);
}

}  // namespace fp4ops::cpu
