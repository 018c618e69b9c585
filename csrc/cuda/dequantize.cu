// Launchers for the NVFP4 / MXFP4 dequantizers: checks, device guard, current stream.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>

#include "../common/op_checks.h"
#include "kernels_cuda.h"
#include "launch_utils.h"
#include "dequantize_kernels.cuh"

namespace fp4ops::cuda {

namespace {

constexpr int kThreads = 256;

template <class Decoding>
at::Tensor launch_dequantize(const at::Tensor& data, const at::Tensor& scales, const Decoding& decoding,
                             at::ScalarType dtype, bool swizzled) {
  const at::Tensor packed = data.contiguous();
  const at::Tensor codes = scales.contiguous();
  at::Tensor out = at::empty(with_last_dim(data, data.size(-1) * 2), data.options().dtype(dtype));
  const int64_t num_units = out.numel() * out.element_size() / 16;  // 16-byte output vectors
  if (num_units == 0) return out;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const uint8_t* in = packed.const_data_ptr<uint8_t>();
  const uint8_t* scale_codes = static_cast<const uint8_t*>(codes.const_data_ptr());
  dispatch_float_type(dtype, "dtype", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* values = static_cast<T*>(out.mutable_data_ptr());
    const unsigned grid = grid_for(decode_steps(num_units), kThreads, /*max_steps=*/1);
    with_scale_index(swizzled, out.sizes(), out.size(-1) / Decoding::Format::kBlock, [&](auto scale_index) {
      using Index = decltype(scale_index);
      with_bool(is_aligned(in, 16 / sizeof(T) / 2), [&](auto aligned) {
        dequantize_kernel<T, decltype(aligned)::value, Decoding, Index>
            <<<grid, kThreads, 0, stream>>>(in, scale_codes, num_units, decoding, scale_index, values);
      });
    });
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

}  // namespace

at::Tensor dequantize_nvfp4(const at::Tensor& data, const at::Tensor& scales, const at::Tensor& global_scale,
                            at::ScalarType dtype, const std::string& scale_layout) {
  const bool swizzled = parse_scale_layout(scale_layout);
  check_dequantize_args(data, scales, at::kFloat8_e4m3fn, kNvfp4Block, dtype, swizzled);
  check_global_scale(global_scale, data, "data");
  const LaunchDevice launch_device(data.device());
  const at::Tensor g = global_scale.reshape({}).contiguous();
  return launch_dequantize(data, scales, Nvfp4Decoding{g.const_data_ptr<float>()}, dtype, swizzled);
}

at::Tensor dequantize_mxfp4(const at::Tensor& data, const at::Tensor& scales, at::ScalarType dtype,
                            const std::string& scale_layout) {
  const bool swizzled = parse_scale_layout(scale_layout);
  check_dequantize_args(data, scales, at::kFloat8_e8m0fnu, kMxfp4Block, dtype, swizzled);
  const LaunchDevice launch_device(data.device());
  return launch_dequantize(data, scales, Mxfp4Decoding{}, dtype, swizzled);
}

}  // namespace fp4ops::cuda
