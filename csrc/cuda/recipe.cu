// Launcher of quantize_nvfp4_recipe: checks, outputs, the global scales (given, from the plain
// amax, or from a rotated-amax pass of the quantizing kernel), then one quantize pass: the
// per-block rowwise kernel or the 2D strip kernel where one applies, else the tile kernel.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>

#include <type_traits>

#include "../common/recipe_checks.h"
#include "kernels_cuda.h"
#include "launch_utils.h"
#include "recipe_kernels.cuh"

namespace fp4ops::cuda {

namespace {

constexpr int64_t kRecipeTilesPerCta = 4;  // tile kernel grid: see launch_recipe

RecipeTiles tiles_of(const RecipeGeometry& geo) {
  const int64_t nb = geo.col_blocks();
  const int64_t row_tiles = (geo.rows + kRecipeTileRows - 1) / kRecipeTileRows;
  const int64_t col_tiles = (nb + kRecipeTileBlocks - 1) / kRecipeTileBlocks;
  const int64_t count = geo.matrices * row_tiles * col_tiles;
  // Below 2^31, so a tile index plus the grid (<= count / 4) never wraps around 32 bits.
  TORCH_CHECK(count < (int64_t{1} << 31), "x: too many 64x64 tiles for one launch (", int_str(count), ")");
  return {geo.rows,
          geo.k,
          geo.strips(),
          nb,
          FastDivU32::make(static_cast<uint32_t>(std::max<int64_t>(1, row_tiles))),
          FastDivU32::make(static_cast<uint32_t>(std::max<int64_t>(1, col_tiles))),
          static_cast<uint32_t>(count)};
}

// A quantizing pass launches as usual; an amax pass (kAmaxOnly: the rotated amax into the two
// words at amax_bits, which the caller has just zeroed with zero_words_kernel) launches as that
// kernel's programmatic dependent, so its blocks read x while the words are zeroed.
template <bool kAmaxOnly, typename... KernelArgs, typename... Args>
void launch_behind_zeroing(void (*kernel)(KernelArgs...), unsigned grid, unsigned threads, cudaStream_t stream,
                           Args&&... args) {
  if constexpr (kAmaxOnly) {
    launch_dependent(kernel, grid, threads, stream, std::forward<Args>(args)...);
  } else {
    kernel<<<grid, threads, 0, stream>>>(std::forward<Args>(args)...);
  }
}

// Both copies, round-to-nearest, no rotation: recipe_kernel's kPlainPair instance.
bool is_plain_pair(const RecipeOptions& opt) {
  return opt.rowwise && opt.columnwise && !opt.stochastic && opt.hadamard_signs < 0;
}

// Runs recipe_kernel over every tile, once for amax (kAmaxOnly) or once to quantize.
template <bool kAmaxOnly, class RowIndex, class ColIndex>
void launch_recipe(const at::Tensor& input, const RecipeTiles& tiles, const RecipeOptions& opt,
                   const Nvfp4Source& row_source, const Nvfp4Source& col_source, const RecipeOut<RowIndex>& row_out,
                   const RecipeOut<ColIndex>& col_out, uint32_t* amax_bits, cudaStream_t stream) {
  // About 4 tiles per CTA (at least 8 CTAs per SM, >= 1 block even with no tiles: block 0
  // publishes the global scales). A CTA pays its prologue (g, two multiplier tables, a barrier)
  // once, which one tile per CTA would repeat for every tile; the share of ~4 was chosen by
  // measurement against shorter and longer ones (docs/recipe.md, "Speed").
  const unsigned grid = grid_for(tiles.count, 1, kRecipeTilesPerCta, /*min_per_sm=*/8);
  dispatch_float_type(input.scalar_type(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = static_cast<const T*>(input.const_data_ptr());
    const auto launch = [&](auto kernel) {
      launch_behind_zeroing<kAmaxOnly>(kernel, grid, kRecipeThreads, stream, x, tiles, opt, row_source, col_source,
                                       row_out, col_out, amax_bits);
    };
    with_bool(is_aligned(x, 16), [&](auto aligned) {
      constexpr bool kAligned = decltype(aligned)::value;
      // The instance is built for 16-bit x and linear scales only: with fp32 x or a swizzled
      // layout, its cap of 5 CTAs per SM makes it spill.
      constexpr bool kHasPlainPair = !kAmaxOnly && sizeof(T) == 2 && std::is_same_v<RowIndex, LinearScales> &&
                                     std::is_same_v<ColIndex, LinearScales>;
      if constexpr (kHasPlainPair) {
        if (is_plain_pair(opt)) return launch(recipe_kernel<T, kAligned, false, RowIndex, ColIndex, true>);
      }
      launch(recipe_kernel<T, kAligned, kAmaxOnly, RowIndex, ColIndex>);
    });
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Rowwise only with 1D scales from 16-bit x: recipe_rowwise_kernel (one thread per block, the
// plain quantizer's access pattern) instead of the tile kernel.
bool takes_rowwise_kernel(const RecipeOptions& opt, const at::Tensor& input) {
  return opt.rowwise && !opt.columnwise && !opt.block_2d && input.element_size() == 2;
}

template <bool kAmaxOnly, class Index>
void launch_recipe_rowwise(const at::Tensor& input, const RecipeOptions& opt, const Nvfp4Source& source,
                           const RecipeOut<Index>& out, uint32_t* amax_bits, cudaStream_t stream) {
  const int64_t num_blocks = input.numel() / kNvfp4Block;
  // >= 1: block 0 publishes g. Unlike the plain quantizer's, this grid stays at 16 CTAs per SM
  // with no cap on blocks per thread: the cap does not pay for this kernel (chosen by
  // measurement: docs/recipe.md, "Speed").
  const unsigned grid = grid_for(num_blocks, kRecipeThreads);
  dispatch_float_type(input.scalar_type(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (sizeof(T) == 2) {
      const T* x = static_cast<const T*>(input.const_data_ptr());
      const auto launch = [&](auto kernel) {
        launch_behind_zeroing<kAmaxOnly>(kernel, grid, kRecipeThreads, stream, x, num_blocks, opt, source, out,
                                         amax_bits);
      };
      with_bool(is_aligned(x, 16), [&](auto aligned) {
        constexpr bool kAligned = decltype(aligned)::value;
        if (opt.hadamard_signs < 0) {
          launch(recipe_rowwise_kernel<T, kAligned, kAmaxOnly, Rotation::kNone, Index>);
        } else if (opt.hadamard_signs == static_cast<int32_t>(kTeHadamardSigns)) {
          launch(recipe_rowwise_kernel<T, kAligned, kAmaxOnly, Rotation::kTeSigns, Index>);
        } else {
          launch(recipe_rowwise_kernel<T, kAligned, kAmaxOnly, Rotation::kRuntimeSigns, Index>);
        }
      });
    }
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

bool takes_rowwise_2d_kernel(const RecipeOptions& opt) { return opt.rowwise && !opt.columnwise && opt.block_2d; }

template <class Index>
void launch_recipe_rowwise_2d(const at::Tensor& input, const RecipeGeometry& geo, const RecipeOptions& opt,
                              const Nvfp4Source& source, const RecipeOut<Index>& out, cudaStream_t stream) {
  const int64_t nb = geo.col_blocks();
  const int64_t col_chunks = (nb + kStripBlocks - 1) / kStripBlocks;
  const int64_t count = geo.matrices * geo.strips() * col_chunks;
  // Below 2^31, so a unit index plus the grid never wraps around 32 bits.
  TORCH_CHECK(count < (int64_t{1} << 31), "x: too many 16 x 512 units for one launch (", int_str(count), ")");
  const StripUnits units{geo.rows, nb, FastDivU32::make(static_cast<uint32_t>(std::max<int64_t>(1, col_chunks))),
                         FastDivU32::make(static_cast<uint32_t>(std::max<int64_t>(1, geo.strips()))),
                         static_cast<uint32_t>(count)};
  dispatch_float_type(input.scalar_type(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = static_cast<const T*>(input.const_data_ptr());
    const auto launch = [&](auto kernel) {
      // One resident wave (each CTA loops with its loads one unit ahead); >= 1 block: block 0
      // publishes g.
      const int resident = resident_ctas(kernel, kStripThreads, 0, static_cast<size_t>(input.get_device()));
      const auto grid = static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(count, resident)));
      kernel<<<grid, kStripThreads, 0, stream>>>(x, units, opt, source, out);
    };
    with_bool(is_aligned(x, 16), [&](auto aligned) {
      constexpr bool kAligned = decltype(aligned)::value;
      if constexpr (std::is_same_v<T, __nv_bfloat16> && std::is_same_v<Index, LinearScales>) {
        if (!opt.stochastic) return launch(recipe_rowwise_2d_bf16_kernel<kAligned>);
      }
      with_bool(opt.stochastic, [&](auto stochastic) {
        launch(recipe_rowwise_2d_kernel<T, kAligned, decltype(stochastic)::value, Index>);
      });
    });
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

uint8_t* bytes(at::Tensor& t) { return static_cast<uint8_t*>(t.data_ptr()); }

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> quantize_nvfp4_recipe(
    const at::Tensor& x, const std::optional<at::Tensor>& global_scale, const std::string& scale_layout, bool rowwise,
    bool columnwise, bool block_2d, int64_t hadamard_signs, const std::optional<int64_t>& seed, int64_t offset) {
  RecipeCall call = prepare_recipe(x, global_scale, scale_layout, rowwise, columnwise, block_2d, hadamard_signs, seed,
                                   offset);
  const RecipeOptions& opt = call.opt;
  const at::Tensor& input = call.input;
  const LaunchDevice launch_device(x.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const RecipeTiles tiles = tiles_of(call.geo);
  const bool rowwise_kernel = takes_rowwise_kernel(opt, input);
  at::Tensor g_row = at::empty({}, x.options().dtype(at::kFloat));
  at::Tensor g_col = at::empty({}, x.options().dtype(at::kFloat));

  // Each direction's g: the given tensor, or derived on the device from an amax (no host sync).
  // Both directions read the same word except under a rotation, whose rowwise and columnwise
  // groups have their own amax. No copy kernels: each small launch is a visible part of the call
  // (docs/recipe.md, "Speed").
  at::Tensor source;  // fp32: the amax (or given g), one word, or [2] for rows and for columns
  bool source_is_amax = true;
  if (global_scale.has_value()) {
    source = global_scale->reshape({}).contiguous();
    source_is_amax = false;
  } else if (opt.hadamard_signs >= 0) {
    source = at::empty({2}, x.options().dtype(at::kFloat));
    uint32_t* amax_bits = reinterpret_cast<uint32_t*>(source.mutable_data_ptr<float>());
    zero_words_kernel<<<1, 1, 0, stream>>>(amax_bits, 2);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    if (rowwise_kernel) {
      launch_recipe_rowwise<true>(input, opt, Nvfp4Source{}, RecipeOut<LinearScales>{}, amax_bits, stream);
    } else {
      launch_recipe<true>(input, tiles, opt, Nvfp4Source{}, Nvfp4Source{}, RecipeOut<LinearScales>{},
                          RecipeOut<LinearScales>{}, amax_bits, stream);
    }
  } else {
    source = fp4ops::cuda::amax(input);
  }
  const float* src = source.const_data_ptr<float>();
  // A direction that is off still returns its g: that of the other direction's source, written
  // by the same kernel.
  float* const g_row_out = g_row.mutable_data_ptr<float>();
  float* const g_col_out = g_col.mutable_data_ptr<float>();
  const Nvfp4Source row_source{src, source_is_amax, g_row_out, columnwise ? nullptr : g_col_out};
  const Nvfp4Source col_source{source.numel() == 2 ? src + 1 : src, source_is_amax, g_col_out,
                               rowwise ? nullptr : g_row_out};
  with_scale_index(call.swizzled && rowwise, x.sizes(), call.geo.col_blocks(), [&](auto row_index) {
    const RecipeOut<decltype(row_index)> row_out{bytes(call.row.data), bytes(call.row.scales), row_index};
    if (rowwise_kernel) {
      launch_recipe_rowwise<false>(input, opt, row_source, row_out, nullptr, stream);
      return;
    }
    if (takes_rowwise_2d_kernel(opt)) {
      launch_recipe_rowwise_2d(input, call.geo, opt, row_source, row_out, stream);
      return;
    }
    with_scale_index(call.swizzled && columnwise, call.t_shape, call.geo.strips(), [&](auto col_index) {
      launch_recipe<false>(input, tiles, opt, row_source, col_source, row_out,
                           RecipeOut<decltype(col_index)>{bytes(call.col.data), bytes(call.col.scales), col_index},
                           nullptr, stream);
    });
  });
  return {call.row.data, call.row.scales, g_row, call.col.data, call.col.scales, g_col};
}

}  // namespace fp4ops::cuda
