// Arguments and outputs of quantize_nvfp4_recipe, shared by the CPU and CUDA launchers.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <string>
#include <vector>

#include "op_checks.h"
#include "recipe.h"

namespace fp4ops {

// x [..., rows, K] seen as `matrices` matrices of rows x K (a 1-D x is one row).
struct RecipeGeometry {
  int64_t matrices;
  int64_t rows;
  int64_t k;

  int64_t strips() const { return (rows + 15) / 16; }  // 16-row strips per matrix
  int64_t col_blocks() const { return k / 16; }
};

inline RecipeGeometry recipe_geometry(const at::Tensor& x) {
  const int64_t rows = matrix_rows(x.sizes());
  const int64_t k = x.size(-1);
  const int64_t per_matrix = rows * k;
  return {per_matrix == 0 ? 0 : x.numel() / per_matrix, rows, k};
}

inline RecipeOptions check_recipe_args(const at::Tensor& x, bool rowwise, bool columnwise, bool block_2d,
                                       int64_t hadamard_signs, const std::optional<int64_t>& seed, int64_t offset) {
  check_float_input(x, "x");
  check_last_dim_multiple(x, "x", kNvfp4Block);
  TORCH_CHECK(rowwise || columnwise, "rowwise: expected rowwise or columnwise output (or both), got neither");
  TORCH_CHECK(hadamard_signs >= -1 && hadamard_signs <= 0xFFFF,
              "hadamard_signs: expected -1 (no rotation) or a 16-bit sign mask, got ", int_str(hadamard_signs));
  TORCH_CHECK(!(block_2d && hadamard_signs >= 0),
              "block_2d: 16x16 block scaling and the Hadamard rotation cannot be combined (as in Transformer Engine)");
  TORCH_CHECK(offset >= 0, "offset: expected a value >= 0, got ", int_str(offset));
  if (columnwise) {
    TORCH_CHECK(x.dim() >= 2 && matrix_rows(x.sizes()) % kNvfp4Block == 0,
                "x: the columnwise output needs rows (dimension -2) a multiple of 16, got shape ", shape_str(x.sizes()));
  }
  if (block_2d) {
    TORCH_CHECK(x.dim() >= 2, "x: 16x16 block scaling needs at least 2 dimensions, got ", shape_str(x.sizes()));
  }
  return {rowwise, columnwise, block_2d, static_cast<int32_t>(hadamard_signs), seed.has_value(),
          static_cast<uint64_t>(offset), philox_keys(static_cast<uint64_t>(seed.value_or(0))),
          hadamard_sign_words(static_cast<int32_t>(hadamard_signs))};
}

// The logical shape of the columnwise output: x^T per matrix, [..., K, rows].
inline std::vector<int64_t> transposed_shape(const at::Tensor& x) {
  auto shape = x.sizes().vec();
  std::swap(shape[shape.size() - 1], shape[shape.size() - 2]);
  return shape;
}

// One direction's outputs: data [..., K/2], scales (either layout), zeroed when swizzled. A
// direction that is off gets empty [0] tensors.
inline QuantizedOutputs allocate_direction(const at::TensorOptions& options, at::IntArrayRef logical, bool enabled,
                                           bool swizzled) {
  if (!enabled) {
    return {at::empty({0}, options.dtype(at::kByte)), at::empty({0}, options.dtype(at::kFloat8_e4m3fn))};
  }
  return {at::empty(with_last_dim(logical, logical.back() / 2), options.dtype(at::kByte)),
          allocate_scales(logical, logical.back() / kNvfp4Block, swizzled, options.dtype(at::kFloat8_e4m3fn))};
}

// What both launchers start from: the checked options, the contiguous input and its geometry, and
// both directions' outputs allocated (the columnwise one over the transposed shape).
struct RecipeCall {
  RecipeOptions opt;
  bool swizzled;
  at::Tensor input;
  RecipeGeometry geo;
  std::vector<int64_t> t_shape;  // empty when columnwise is off
  QuantizedOutputs row;
  QuantizedOutputs col;
};

inline RecipeCall prepare_recipe(const at::Tensor& x, const std::optional<at::Tensor>& global_scale,
                                 const std::string& scale_layout, bool rowwise, bool columnwise, bool block_2d,
                                 int64_t hadamard_signs, const std::optional<int64_t>& seed, int64_t offset) {
  const RecipeOptions opt = check_recipe_args(x, rowwise, columnwise, block_2d, hadamard_signs, seed, offset);
  const bool swizzled = parse_scale_layout(scale_layout);
  if (global_scale.has_value()) check_global_scale(*global_scale, x, "x");
  at::Tensor input = x.contiguous();
  const RecipeGeometry geo = recipe_geometry(input);
  auto t_shape = columnwise ? transposed_shape(x) : std::vector<int64_t>{};
  QuantizedOutputs row = allocate_direction(x.options(), x.sizes(), rowwise, swizzled);
  QuantizedOutputs col = allocate_direction(x.options(), t_shape, columnwise, swizzled);
  return {opt, swizzled, std::move(input), geo, std::move(t_shape), std::move(row), std::move(col)};
}

}  // namespace fp4ops
