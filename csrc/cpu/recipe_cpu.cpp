// quantize_nvfp4_recipe on the CPU: rowwise and/or columnwise NVFP4 with 16x16 block scaling,
// the Hadamard rotation and stochastic rounding (csrc/common/recipe.h has the shared math). Work
// is split into 16-row strips of one matrix, the unit that both directions and 2D tiles share.
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <vector>

#include "../common/recipe_checks.h"
#include "kernels_cpu.h"

namespace fp4ops::cpu {

namespace {

// max |v| over the finite elements of a group, and whether all of it is finite.
struct GroupMax {
  float max = 0.0f;
  bool finite = true;

  void add(float v) {
    finite &= is_finite_bits(float_to_bits(v));
    max = std::max(max, finite_abs(v));
  }
  void merge(const GroupMax& other) {
    finite &= other.finite;
    max = std::max(max, other.max);
  }
};

// A strip of 16 rows (fewer at a matrix's end) of one matrix, widened to fp32.
template <typename scalar_t>
struct Strip {
  const scalar_t* x;  // the strip's first row
  int64_t rows;       // rows in this strip
  int64_t k;

  float at(int64_t r, int64_t c) const { return static_cast<float>(x[r * k + c]); }

  // Row r, block cb (16 elements), rotated if asked.
  void row_group(int64_t r, int64_t cb, int32_t signs, float (&v)[16]) const {
    for (int i = 0; i < 16; ++i) v[i] = at(r, cb * 16 + i);
    if (signs >= 0) hadamard16(v, static_cast<uint32_t>(signs));
  }
  // Column c over the strip's 16 rows (a full strip), rotated if asked.
  void column_group(int64_t c, int32_t signs, float (&v)[16]) const {
    for (int i = 0; i < 16; ++i) v[i] = at(i, c);
    if (signs >= 0) hadamard16(v, static_cast<uint32_t>(signs));
  }
  // The 16x16 tile of block column cb (2D scaling).
  GroupMax tile_max(int64_t cb) const {
    GroupMax m;
    for (int64_t r = 0; r < rows; ++r)
      for (int i = 0; i < 16; ++i) m.add(at(r, cb * 16 + i));
    return m;
  }
};

template <int kN>
GroupMax group_max(const float (&v)[kN]) {
  GroupMax m;
  for (float value : v) m.add(value);
  return m;
}

// Where one direction's codes and scales go: block b (linear index in that direction's output)
// at data + 8 b and scale_index.offset(b).
template <class ScaleIndex>
struct DirectionOut {
  uint8_t* data;
  uint8_t* scales;
  ScaleIndex scale_index;
  bool columnwise;

  void write(int64_t b, const float (&v)[16], const GroupMax& m, const Nvfp4Format& format,
             const RecipeOptions& opt) const {
    const BlockEncoding enc = format.encode(m.finite ? m.max : 0.0f, m.finite);
    const Philox4 random = opt.stochastic ? philox4x32_10(b, columnwise, opt.offset, opt.keys) : Philox4{};
    uint32_t words[2];
    encode_block16(v, enc, opt.stochastic, random, words);
    for (int i = 0; i < 8; ++i) data[b * 8 + i] = static_cast<uint8_t>(words[i / 4] >> (8 * (i % 4)));
    scales[scale_index.offset(b)] = static_cast<uint8_t>(enc.scale_code);
  }
};

template <typename scalar_t>
Strip<scalar_t> strip_at(const scalar_t* x, const RecipeGeometry& geo, int64_t unit) {
  const int64_t m = unit / geo.strips(), s = unit % geo.strips();
  const int64_t r0 = s * 16;
  return {x + (m * geo.rows + r0) * geo.k, std::min<int64_t>(16, geo.rows - r0), geo.k};
}

// SPEC 2.1's amax of what each direction quantizes (rotated values when the rotation is on).
template <typename scalar_t>
std::pair<float, float> recipe_amax(const scalar_t* x, const RecipeGeometry& geo, const RecipeOptions& opt) {
  const int64_t units = geo.matrices * geo.strips();
  std::vector<float> row_max(units, 0.0f), col_max(units, 0.0f);
  at::parallel_for(0, units, 16, [&](int64_t begin, int64_t end) {
    float v[16];
    for (int64_t u = begin; u < end; ++u) {
      const Strip<scalar_t> strip = strip_at(x, geo, u);
      for (int64_t cb = 0; cb < geo.col_blocks(); ++cb) {
        for (int64_t r = 0; opt.rowwise && r < strip.rows; ++r) {
          strip.row_group(r, cb, opt.hadamard_signs, v);
          row_max[u] = std::max(row_max[u], group_max(v).max);
        }
      }
      for (int64_t c = 0; opt.columnwise && c < geo.k; ++c) {
        strip.column_group(c, opt.hadamard_signs, v);
        col_max[u] = std::max(col_max[u], group_max(v).max);
      }
    }
  });
  const auto max_of = [](const std::vector<float>& v) { return v.empty() ? 0.0f : *std::max_element(v.begin(), v.end()); };
  return {max_of(row_max), max_of(col_max)};
}

template <typename scalar_t, class RowIndex, class ColIndex>
void recipe_quantize(const scalar_t* x, const RecipeGeometry& geo, const RecipeOptions& opt, float g_row, float g_col,
                     const DirectionOut<RowIndex>& row_out, const DirectionOut<ColIndex>& col_out) {
  const Nvfp4Format row_format{g_row}, col_format{g_col};
  const int64_t nb = geo.col_blocks();
  at::parallel_for(0, geo.matrices * geo.strips(), 16, [&](int64_t begin, int64_t end) {
    float v[16];
    for (int64_t u = begin; u < end; ++u) {
      const Strip<scalar_t> strip = strip_at(x, geo, u);
      const int64_t m = u / geo.strips(), s = u % geo.strips();
      for (int64_t cb = 0; cb < nb; ++cb) {
        const GroupMax tile = opt.block_2d ? strip.tile_max(cb) : GroupMax{};
        for (int64_t r = 0; opt.rowwise && r < strip.rows; ++r) {
          strip.row_group(r, cb, opt.hadamard_signs, v);
          row_out.write((m * geo.rows + s * 16 + r) * nb + cb, v, opt.block_2d ? tile : group_max(v), row_format, opt);
        }
        for (int64_t c = cb * 16; opt.columnwise && c < cb * 16 + 16; ++c) {
          strip.column_group(c, opt.hadamard_signs, v);
          col_out.write((m * geo.k + c) * geo.strips() + s, v, opt.block_2d ? tile : group_max(v), col_format, opt);
        }
      }
    }
  });
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> quantize_nvfp4_recipe(
    const at::Tensor& x, const std::optional<at::Tensor>& global_scale, const std::string& scale_layout, bool rowwise,
    bool columnwise, bool block_2d, int64_t hadamard_signs, const std::optional<int64_t>& seed, int64_t offset) {
  RecipeCall call = prepare_recipe(x, global_scale, scale_layout, rowwise, columnwise, block_2d, hadamard_signs, seed,
                                   offset);
  const RecipeOptions& opt = call.opt;
  const at::Tensor& input = call.input;
  float g_row = 0.0f, g_col = 0.0f;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "fp4ops_recipe_cpu", [&] {
    const scalar_t* px = input.const_data_ptr<scalar_t>();
    if (global_scale.has_value()) {
      g_row = g_col = global_scale->reshape({}).item<float>();
    } else if (opt.hadamard_signs >= 0) {
      const auto [row_amax, col_amax] = recipe_amax(px, call.geo, opt);
      g_row = nvfp4_global_scale_from_amax(row_amax);
      g_col = nvfp4_global_scale_from_amax(col_amax);
    } else {
      g_row = g_col = nvfp4_global_scale_from_amax(finite_amax(input));
    }
    // A direction that is off still returns a g: the other direction's.
    if (!rowwise) g_row = g_col;
    if (!columnwise) g_col = g_row;
    const auto bytes = [](at::Tensor& t) { return static_cast<uint8_t*>(t.data_ptr()); };
    with_scale_index(call.swizzled && rowwise, x.sizes(), call.geo.col_blocks(), [&](auto row_index) {
      with_scale_index(call.swizzled && columnwise, call.t_shape, call.geo.strips(), [&](auto col_index) {
        using RowOut = DirectionOut<decltype(row_index)>;
        using ColOut = DirectionOut<decltype(col_index)>;
        recipe_quantize(px, call.geo, opt, g_row, g_col,
                        RowOut{bytes(call.row.data), bytes(call.row.scales), row_index, false},
                        ColOut{bytes(call.col.data), bytes(call.col.scales), col_index, true});
      });
    });
  });
  const auto scalar = [&](float g) { return at::scalar_tensor(g, x.options().dtype(at::kFloat)); };
  return {call.row.data, call.row.scales, scalar(g_row), call.col.data, call.col.scales, scalar(g_col)};
}

}  // namespace fp4ops::cpu
