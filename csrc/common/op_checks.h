// Argument checks and output allocation shared by the CPU and CUDA launchers. The Python wrappers
// check the same things first (with the same words); these keep torch.ops.fp4ops.* calls safe.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <string>

#include "block_formats.h"
#include "scale_layout.h"

namespace fp4ops {

// Numbers and shapes go into messages as std::string: on one torch 2.11 + GCC 13 machine,
// streaming an int64_t into TORCH_CHECK from an extension crashed the process (a minimal
// load_inline probe too; see docs/decisions.md), while strings and dtypes streamed fine.
inline std::string int_str(int64_t value) { return std::to_string(value); }

inline std::string shape_str(at::IntArrayRef shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

inline void check_float_input(const at::Tensor& x, const char* name) {
  const auto dtype = x.scalar_type();
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kHalf || dtype == at::kBFloat16, name,
              ": expected float32, float16 or bfloat16, got ", dtype);
  TORCH_CHECK(x.dim() >= 1, name, ": expected at least 1 dimension, got a 0-dim tensor");
}

inline void check_last_dim_multiple(const at::Tensor& x, const char* name, int64_t multiple) {
  TORCH_CHECK(x.size(-1) % multiple == 0, name, ": expected the last dimension to be a multiple of ",
              int_str(multiple), ", got ", int_str(x.size(-1)));
}

inline void check_out_dtype(at::ScalarType dtype) {
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kHalf || dtype == at::kBFloat16,
              "dtype: expected float32, float16 or bfloat16, got ", dtype);
}

inline void check_packed(const at::Tensor& data, const char* name) {
  TORCH_CHECK(data.scalar_type() == at::kByte, name, ": expected uint8 (packed E2M1), got ",
              data.scalar_type());
  TORCH_CHECK(data.dim() >= 1, name, ": expected at least 1 dimension, got a 0-dim tensor");
}

inline void check_same_device(const at::Tensor& t, const char* name, const at::Tensor& ref,
                              const char* ref_name) {
  TORCH_CHECK(t.device() == ref.device(), name, ": expected a tensor on ", ref.device().str(), " (the device of ",
              ref_name, "), got ", t.device().str());
}

inline std::vector<int64_t> with_last_dim(at::IntArrayRef sizes, int64_t last) {
  auto out = sizes.vec();
  out.back() = last;
  return out;
}

inline std::vector<int64_t> with_last_dim(const at::Tensor& t, int64_t last) { return with_last_dim(t.sizes(), last); }

// SPEC 4: "linear" or "swizzled" (the 128x4 atom of torch._scaled_mm).
inline bool parse_scale_layout(const std::string& scale_layout) {
  TORCH_CHECK(scale_layout == "linear" || scale_layout == "swizzled",
              "scale_layout: expected \"linear\" or \"swizzled\", got \"", scale_layout, "\"");
  return scale_layout == "swizzled";
}

// Rows of each scale matrix of a tensor [..., rows, K]: a 1-D tensor is one row.
inline int64_t matrix_rows(at::IntArrayRef logical) { return logical.size() >= 2 ? logical[logical.size() - 2] : 1; }

// The shape of the scales of a tensor of logical shape [..., rows, K] with `cols` = K / block:
// linear [..., rows, cols]; swizzled [..., ceil(rows/128)*128, ceil(cols/4)*4] (one padded
// matrix per leading batch index; a 1-D tensor's is [128, ceil(cols/4)*4]).
inline std::vector<int64_t> scale_shape(at::IntArrayRef logical, int64_t cols, bool swizzled) {
  if (!swizzled) return with_last_dim(logical, cols);
  std::vector<int64_t> shape(logical.begin(), logical.end() - (logical.size() >= 2 ? 2 : 1));
  shape.push_back((matrix_rows(logical) + 127) / 128 * 128);
  shape.push_back((cols + 3) / 4 * 4);
  return shape;
}

// Calls fn(scale_index) with the LinearScales or SwizzledScales of a tensor of logical shape
// [..., rows, K] with `cols` = K / block scale columns: kernels are instantiated for both.
inline SwizzledScales swizzled_scales_for(at::IntArrayRef logical, int64_t cols) {
  int64_t numel = 1;
  for (const int64_t n : logical) numel *= n;
  const int64_t k = logical.empty() ? 0 : logical.back();
  return SwizzledScales::make(matrix_rows(logical), cols, k == 0 ? 0 : numel / k * cols);
}

template <typename Fn>
void with_scale_index(bool swizzled, at::IntArrayRef logical, int64_t cols, Fn&& fn) {
  if (swizzled) {
    fn(swizzled_scales_for(logical, cols));
  } else {
    fn(LinearScales{});
  }
}

// Swizzled scales [shape] start zeroed when their matrices have padding: the kernels write
// only real scales, and SPEC 4 wants every padding byte 0 (stale padding is a real bug class).
inline at::Tensor allocate_scales(at::IntArrayRef logical, int64_t cols, bool swizzled, const at::TensorOptions& options) {
  const auto shape = scale_shape(logical, cols, swizzled);
  return swizzled && swizzled_scales_for(logical, cols).has_padding() ? at::zeros(shape, options) : at::empty(shape, options);
}

// swizzle_scales / unswizzle_scales take scale codes of either format (not raw uint8, SPEC 4).
inline void check_scale_codes(const at::Tensor& scales, const char* name, int64_t min_dim) {
  TORCH_CHECK(scales.scalar_type() == at::kFloat8_e4m3fn || scales.scalar_type() == at::kFloat8_e8m0fnu, name,
              ": expected float8_e4m3fn (NVFP4) or float8_e8m0fnu (MXFP4) scales, got ", scales.scalar_type());
  TORCH_CHECK(scales.dim() >= min_dim, name, ": expected at least ", int_str(min_dim), " dimension(s), got ",
              int_str(scales.dim()));
}

// unswizzle_scales(scales, rows, cols): scales are [..., ceil(rows/128)*128, ceil(cols/4)*4];
// returns the linear shape [..., rows, cols].
inline std::vector<int64_t> check_unswizzle_args(const at::Tensor& scales, int64_t rows, int64_t cols) {
  check_scale_codes(scales, "scales", 2);
  TORCH_CHECK(rows >= 0, "rows: expected a value >= 0, got ", int_str(rows));
  TORCH_CHECK(cols >= 0, "cols: expected a value >= 0, got ", int_str(cols));
  std::vector<int64_t> linear(scales.sizes().begin(), scales.sizes().end() - 2);
  linear.push_back(rows);
  linear.push_back(cols);
  const auto expected = scale_shape(linear, cols, true);
  TORCH_CHECK(scales.sizes().vec() == expected, "scales: expected the swizzled shape ", shape_str(expected),
              " for rows = ", int_str(rows), ", cols = ", int_str(cols), ", got ", shape_str(scales.sizes()));
  return linear;
}

// scales must be [..., K / block] of `dtype` for data [..., K / 2] (or the swizzled shape), on
// the same device.
inline void check_scales(const at::Tensor& scales, const at::Tensor& data, at::ScalarType dtype, int64_t block,
                         bool swizzled = false) {
  TORCH_CHECK(scales.scalar_type() == dtype, "scales: expected ", dtype, ", got ", scales.scalar_type());
  check_same_device(scales, "scales", data, "data");
  const int64_t k = data.size(-1) * 2;
  TORCH_CHECK(k % block == 0, "data: expected the last dimension to be a multiple of ", int_str(block / 2),
              " bytes (K a multiple of ", int_str(block), "), got ", int_str(data.size(-1)));
  const auto expected = scale_shape(with_last_dim(data, k), k / block, swizzled);
  TORCH_CHECK(scales.sizes().vec() == expected, "scales: expected shape ", shape_str(expected), " (",
              swizzled ? "swizzled" : "linear", " layout) for data of shape ", shape_str(data.sizes()), ", got ",
              shape_str(scales.sizes()));
}

inline void check_global_scale(const at::Tensor& global_scale, const at::Tensor& ref, const char* ref_name) {
  TORCH_CHECK(global_scale.scalar_type() == at::kFloat, "global_scale: expected float32, got ",
              global_scale.scalar_type());
  TORCH_CHECK(global_scale.numel() == 1, "global_scale: expected one element, got shape ",
              shape_str(global_scale.sizes()));
  check_same_device(global_scale, "global_scale", ref, ref_name);
}

// The arguments of dequantize_nvfp4 / dequantize_mxfp4 (global_scale only for NVFP4).
inline void check_dequantize_args(const at::Tensor& data, const at::Tensor& scales, at::ScalarType scale_dtype,
                                  int64_t block, at::ScalarType dtype, bool swizzled) {
  check_packed(data, "data");
  check_scales(scales, data, scale_dtype, block, swizzled);
  check_out_dtype(dtype);
}

// GEMV (SPEC 5): A data [L, M, K/2] with scales of its format; the global scale is present
// exactly for NVFP4. Returns the block size of A's format.
inline int64_t check_gemv_a(const at::Tensor& data, const at::Tensor& scales, const std::optional<at::Tensor>& global_scale) {
  check_packed(data, "a_data");
  TORCH_CHECK(data.dim() == 3, "a_data: expected 3 dimensions [L, M, K/2], got ", int_str(data.dim()));
  const bool nvfp4 = scales.scalar_type() == at::kFloat8_e4m3fn;
  TORCH_CHECK(nvfp4 || scales.scalar_type() == at::kFloat8_e8m0fnu,
              "a_scales: expected float8_e4m3fn (NVFP4) or float8_e8m0fnu (MXFP4), got ", scales.scalar_type());
  const int64_t block = nvfp4 ? kNvfp4Block : kMxfp4Block;
  check_scales(scales, data, scales.scalar_type(), block);
  TORCH_CHECK(global_scale.has_value() == nvfp4, "a_global_scale: expected ", nvfp4 ? "a tensor for NVFP4" : "None for MXFP4");
  if (global_scale.has_value()) check_global_scale(*global_scale, data, "a_data");
  return block;
}

// B of a GEMV: [L, K] dense fp16/bf16 (b_scales absent) or FP4 data [L, K/2] of A's format.
inline void check_gemv_b(const at::Tensor& a_data, const at::Tensor& a_scales, const at::Tensor& b,
                         const at::Tensor* b_scales, const std::optional<at::Tensor>& b_global_scale) {
  check_same_device(b, b_scales ? "b_data" : "b", a_data, "a_data");
  TORCH_CHECK(b.dim() == 2, b_scales ? "b_data" : "b", ": expected 2 dimensions [L, K], got ", int_str(b.dim()));
  TORCH_CHECK(b.size(0) == a_data.size(0), b_scales ? "b_data" : "b", ": expected L = ", int_str(a_data.size(0)),
              " (from a_data), got ", int_str(b.size(0)));
  if (b_scales == nullptr) {
    TORCH_CHECK(b.scalar_type() == at::kHalf || b.scalar_type() == at::kBFloat16,
                "b: expected float16 or bfloat16, got ", b.scalar_type());
    TORCH_CHECK(b.size(1) == a_data.size(2) * 2, "b: expected K = ", int_str(a_data.size(2) * 2), " (from a_data), got ",
                int_str(b.size(1)));
    return;
  }
  check_packed(b, "b_data");
  TORCH_CHECK(b.size(1) == a_data.size(2), "b_data: expected K/2 = ", int_str(a_data.size(2)),
              " (from a_data), got ", int_str(b.size(1)));
  TORCH_CHECK(b_scales->scalar_type() == a_scales.scalar_type(), "b_scales: expected ", a_scales.scalar_type(),
              " (the format of a), got ", b_scales->scalar_type());
  check_scales(*b_scales, b, a_scales.scalar_type(), a_scales.scalar_type() == at::kFloat8_e4m3fn ? kNvfp4Block : kMxfp4Block);
  const bool nvfp4 = a_scales.scalar_type() == at::kFloat8_e4m3fn;
  TORCH_CHECK(b_global_scale.has_value() == nvfp4, "b_global_scale: expected ", nvfp4 ? "a tensor for NVFP4" : "None for MXFP4");
  if (b_global_scale.has_value()) check_global_scale(*b_global_scale, a_data, "a_data");
}

inline void check_gemv_out_dtype(at::ScalarType dtype) {
  TORCH_CHECK(dtype == at::kHalf || dtype == at::kBFloat16 || dtype == at::kFloat,
              "out_dtype: expected float16, bfloat16 or float32, got ", dtype);
}

// fp4ops.linear: a 2-D FP4 operand's scales, [rows, K/block] of `dtype` in the linear layout, on
// its data's device (the op takes no swizzled scales: the Python wrapper unswizzles them).
inline void check_linear_scales(const at::Tensor& scales, const char* name, const at::Tensor& data,
                                const char* data_name, at::ScalarType dtype, int64_t block) {
  TORCH_CHECK(scales.scalar_type() == dtype, name, ": expected ", dtype, " (the format of w), got ", scales.scalar_type());
  check_same_device(scales, name, data, data_name);
  const std::vector<int64_t> expected{data.size(0), data.size(1) * 2 / block};
  TORCH_CHECK(scales.sizes().vec() == expected, name, ": expected shape ", shape_str(expected), " (linear layout) for ",
              data_name, " of shape ", shape_str(data.sizes()), ", got ", shape_str(scales.sizes()));
}

// fp4ops.linear's NVFP4 global scales: present exactly for NVFP4, one fp32 element on w's device.
inline void check_linear_global_scale(const std::optional<at::Tensor>& global_scale, const char* name, bool nvfp4,
                                      const at::Tensor& w_data) {
  TORCH_CHECK(global_scale.has_value() == nvfp4, name, ": expected ", nvfp4 ? "a tensor for NVFP4" : "None for MXFP4");
  if (!global_scale.has_value()) return;
  TORCH_CHECK(global_scale->scalar_type() == at::kFloat, name, ": expected float32, got ", global_scale->scalar_type());
  TORCH_CHECK(global_scale->numel() == 1, name, ": expected one element, got shape ", shape_str(global_scale->sizes()));
  check_same_device(*global_scale, name, w_data, "w_data");
}

// y = x W^T (+ bias): W data uint8 [N, K/2] with linear scales [N, K/block] of its format (E4M3:
// NVFP4, with w_global_scale; E8M0: MXFP4, without); x dense fp16/bf16 [M, K] (x_scales and
// x_global_scale None) or FP4 of W's format, data [M, K/2] with x_scales [M, K/block] (and
// x_global_scale for NVFP4); bias [N] (fp16, bf16 or fp32) or None; every tensor on w_data's device.
// The CPU kernel and the CUDA launcher both start with this.
inline void check_linear(const at::Tensor& x, const std::optional<at::Tensor>& x_scales,
                         const std::optional<at::Tensor>& x_global_scale, const at::Tensor& w_data,
                         const at::Tensor& w_scales, const std::optional<at::Tensor>& w_global_scale,
                         const std::optional<at::Tensor>& bias, at::ScalarType out_dtype) {
  check_packed(w_data, "w_data");
  TORCH_CHECK(w_data.dim() == 2, "w_data: expected 2 dimensions [N, K/2], got ", int_str(w_data.dim()));
  const bool nvfp4 = w_scales.scalar_type() == at::kFloat8_e4m3fn;
  TORCH_CHECK(nvfp4 || w_scales.scalar_type() == at::kFloat8_e8m0fnu,
              "w_scales: expected float8_e4m3fn (NVFP4) or float8_e8m0fnu (MXFP4), got ", w_scales.scalar_type());
  const int64_t block = nvfp4 ? kNvfp4Block : kMxfp4Block;
  const int64_t n = w_data.size(0), k = w_data.size(1) * 2;
  TORCH_CHECK(k % block == 0, "w_data: expected the last dimension to be a multiple of ", int_str(block / 2),
              " bytes (K a multiple of ", int_str(block), "), got ", int_str(w_data.size(1)));
  check_linear_scales(w_scales, "w_scales", w_data, "w_data", w_scales.scalar_type(), block);
  check_linear_global_scale(w_global_scale, "w_global_scale", nvfp4, w_data);

  check_same_device(x, "x", w_data, "w_data");
  TORCH_CHECK(x.dim() == 2, "x: expected 2 dimensions [M, K] (or [M, K/2] packed), got ", int_str(x.dim()));
  if (!x_scales.has_value()) {
    TORCH_CHECK(x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16,
                "x: expected float16 or bfloat16 (or packed E2M1 uint8 with x_scales), got ", x.scalar_type());
    TORCH_CHECK(x.size(1) == k, "x: expected K = ", int_str(k), " (from w_data), got ", int_str(x.size(1)));
    TORCH_CHECK(!x_global_scale.has_value(), "x_global_scale: expected None for a dense x");
  } else {
    check_packed(x, "x");
    TORCH_CHECK(x.size(1) == k / 2, "x: expected K/2 = ", int_str(k / 2), " (from w_data), got ", int_str(x.size(1)));
    check_linear_scales(*x_scales, "x_scales", x, "x", w_scales.scalar_type(), block);
    check_linear_global_scale(x_global_scale, "x_global_scale", nvfp4, w_data);
  }

  if (bias.has_value()) {
    const auto dtype = bias->scalar_type();
    TORCH_CHECK(dtype == at::kHalf || dtype == at::kBFloat16 || dtype == at::kFloat,
                "bias: expected float16, bfloat16 or float32, got ", dtype);
    TORCH_CHECK(bias->dim() == 1 && bias->size(0) == n, "bias: expected shape [", int_str(n), "] (N from w_data), got ",
                shape_str(bias->sizes()));
    check_same_device(*bias, "bias", w_data, "w_data");
  }
  check_gemv_out_dtype(out_dtype);
}

// Outputs of a quantize: data uint8 [..., K/2], scales [..., K/block] of scale_dtype.
struct QuantizedOutputs {
  at::Tensor data;
  at::Tensor scales;
};

// For a tensor of logical shape `logical` [..., K] on the device of `options`.
inline QuantizedOutputs allocate_quantized(at::IntArrayRef logical, const at::TensorOptions& options, int64_t block,
                                           at::ScalarType scale_dtype, bool swizzled) {
  const int64_t k = logical.back();
  return {at::empty(with_last_dim(logical, k / 2), options.dtype(at::kByte)),
          allocate_scales(logical, k / block, swizzled, options.dtype(scale_dtype))};
}

inline QuantizedOutputs allocate_quantized(const at::Tensor& x, int64_t block, at::ScalarType scale_dtype,
                                           bool swizzled) {
  return allocate_quantized(x.sizes(), x.options(), block, scale_dtype, swizzled);
}

inline Mxfp4ScaleRule parse_scale_rule(const std::string& scale_rule) {
  TORCH_CHECK(scale_rule == "floor" || scale_rule == "rceil",
              "scale_rule: expected \"floor\" or \"rceil\", got \"", scale_rule, "\"");
  return scale_rule == "floor" ? Mxfp4ScaleRule::kFloor : Mxfp4ScaleRule::kRceil;
}

}  // namespace fp4ops
