// CUDA launchers, registered in register_cuda.cpp.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <string>

namespace fp4ops::cuda {

at::Tensor amax(const at::Tensor& x);
std::tuple<at::Tensor, at::Tensor, at::Tensor> quantize_nvfp4(const at::Tensor& x,
                                                              const std::optional<at::Tensor>& global_scale,
                                                              const std::string& scale_layout);
std::tuple<at::Tensor, at::Tensor> quantize_mxfp4(const at::Tensor& x, const std::string& scale_rule,
                                                  const std::string& scale_layout);
at::Tensor dequantize_nvfp4(const at::Tensor& data, const at::Tensor& scales, const at::Tensor& global_scale,
                            at::ScalarType dtype, const std::string& scale_layout);
at::Tensor dequantize_mxfp4(const at::Tensor& data, const at::Tensor& scales, at::ScalarType dtype,
                            const std::string& scale_layout);
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> quantize_nvfp4_recipe(
    const at::Tensor& x, const std::optional<at::Tensor>& global_scale, const std::string& scale_layout, bool rowwise,
    bool columnwise, bool block_2d, int64_t hadamard_signs, const std::optional<int64_t>& seed, int64_t offset);
at::Tensor swizzle_scales(const at::Tensor& scales);
at::Tensor unswizzle_scales(const at::Tensor& scales, int64_t rows, int64_t cols);
at::Tensor cast_to_e2m1(const at::Tensor& x);
at::Tensor cast_from_e2m1(const at::Tensor& data, at::ScalarType dtype);
at::Tensor gemv_fp4_dense(const at::Tensor& a_data, const at::Tensor& a_scales,
                          const std::optional<at::Tensor>& a_global_scale, const at::Tensor& b,
                          at::ScalarType out_dtype);
at::Tensor gemv_fp4_fp4(const at::Tensor& a_data, const at::Tensor& a_scales,
                        const std::optional<at::Tensor>& a_global_scale, const at::Tensor& b_data,
                        const at::Tensor& b_scales, const std::optional<at::Tensor>& b_global_scale,
                        at::ScalarType out_dtype);
at::Tensor linear(const at::Tensor& x, const std::optional<at::Tensor>& x_scales,
                  const std::optional<at::Tensor>& x_global_scale, const at::Tensor& w_data, const at::Tensor& w_scales,
                  const std::optional<at::Tensor>& w_global_scale, const std::optional<at::Tensor>& bias,
                  at::ScalarType out_dtype, bool batch_invariant);

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> rms_norm_quantize(
    const at::Tensor& x, const at::Tensor& weight, double eps, const std::optional<at::Tensor>& residual,
    const std::string& format, const std::optional<at::Tensor>& global_scale, const std::string& scale_rule,
    const std::string& scale_layout, bool return_intermediate);
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> silu_mul_quantize(
    const at::Tensor& x, const std::string& format, const std::optional<at::Tensor>& global_scale,
    const std::string& scale_rule, const std::string& scale_layout, bool return_intermediate);

}  // namespace fp4ops::cuda
