// quantize_nvfp4_recipe on the GPU: rowwise and/or columnwise NVFP4 of x, read once, with 16x16
// block scales, the Hadamard rotation and stochastic rounding (csrc/common/recipe.h).
//
// Work unit: a tile of 64 rows x 64 columns of one matrix for a 256-thread block. Rowwise,
// thread t takes row t / 4, block column t % 4: it loads that 16-element group (two or four
// 16-byte loads; four threads cover a row's 128 bytes) and writes 8 code bytes (four threads: one
// 32-byte sector). Columnwise, the tile goes through shared memory and thread t takes column
// t / 4 of strip t % 4: 16 values down the strip, one block of x^T, whose 8 code bytes sit next
// to those of the other three strips (again one 32-byte sector per column). 2D tile maxima are
// reduced across 16 rows in shared memory.
//
// recipe_rowwise_kernel takes the common rowwise-only 1D case without the tile's staging through
// shared memory and its per-tile barriers (one thread per block, the plain quantizer's order), and
// recipe_rowwise_2d_kernel (and its bf16 instance recipe_rowwise_2d_bf16_kernel) the rowwise-only
// 2D case (a warp per row of a 16-row strip, the tile maxima through shared memory).
#pragma once

#include <cstdint>

#include "../common/recipe.h"
#include "../common/scale_layout.h"
#include "amax_kernels.cuh"
#include "element_types.cuh"
#include "quantize_kernels.cuh"

namespace fp4ops::cuda {

constexpr int kRecipeThreads = 256;
constexpr int kRecipeTileRows = 64;
constexpr int kRecipeTileBlocks = 4;  // 16-element blocks per tile row: 64 columns
constexpr int kRecipeRowStride = 65;  // fp32 words per shared tile row (padded against bank conflicts)

// Tile counts fit in 32 bits (the launcher checks), so the per-tile index math is 32-bit.
// The divisors are precomputed (FastDivU32): a multiply-high and shifts per division instead of
// two 32-bit integer divisions in every tile's loop head.
struct RecipeTiles {
  int64_t rows, k;
  int64_t strips;        // ceil(rows / 16): 16-row strips per matrix
  int64_t nb;            // k / 16 blocks per row
  FastDivU32 row_tiles;  // ceil(rows / 64)
  FastDivU32 col_tiles;  // ceil(nb / 4)
  uint32_t count;        // matrices * row_tiles * col_tiles
};

// Where one direction's codes and scales go: block b at data + 8 b and scales[index.offset(b)].
template <class ScaleIndex>
struct RecipeOut {
  uint8_t* data;
  uint8_t* scales;
  ScaleIndex index;
};

// Largest finite |v| as fp32 bits (non-finite elements skipped): SPEC 2.1's amax share.
__device__ __forceinline__ uint32_t finite_max_bits16(const float (&v)[16]) {
  uint32_t m = 0;
#pragma unroll
  for (int i = 0; i < 16; ++i) m = max(m, __float_as_uint(finite_abs(v[i])));
  return m;
}

// Encode one block and store its 8 code bytes and its scale (at byte scale_offset of the scales).
// `max_bits` >= kInfBits: non-finite. b is the block's index in its direction's output. The
// format is the CTA's tabulated one (Nvfp4TabulatedFormat: same bits as Nvfp4Format, without a
// division per block).
template <class ScaleIndex>
__device__ __forceinline__ void store_block(const RecipeOut<ScaleIndex>& out, int64_t b, int64_t scale_offset,
                                            const float (&v)[16], uint32_t max_bits,
                                            const Nvfp4TabulatedFormat& format, const RecipeOptions& opt,
                                            bool columnwise) {
  const bool finite = max_bits < kInfBits;
  const BlockEncoding enc = format.encode(finite ? __uint_as_float(max_bits) : 0.0f, finite);
  const Philox4 random = opt.stochastic ? philox4x32_10(b, columnwise, opt.offset, opt.keys) : Philox4{};
  uint32_t words[2];
  encode_block16(v, enc, opt.stochastic, random, words);
  __stcs(reinterpret_cast<uint2*>(out.data) + b, make_uint2(words[0], words[1]));
  out.scales[scale_offset] = static_cast<uint8_t>(enc.scale_code);
}

// The max of 16 block maxima stored contiguously in shared memory (16-byte aligned): four 16-byte
// loads and 3-input maxes instead of 16 word loads and 16 maxes. Both 2D kernels keep their
// maxima by block column, a tile's 16 rows adjacent (the strip kernel reads them the same way,
// written out).
__device__ __forceinline__ uint32_t max_of_16(const uint32_t* p) {
  const uint4* q = reinterpret_cast<const uint4*>(p);
  uint32_t m = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint4 w = q[i];
    m = max(max(m, w.x), max(w.y, max(w.z, w.w)));
  }
  return m;
}

// Each element of two loaded 16-bit groups with its sign flipped where `flips` says
// (hadamard_sign_words): one XOR per two packed elements, where hadamard16's flips of fp32 values
// take a shift and a LOP3 each with runtime signs. The flips' words are kernel parameters.
template <typename T>
__device__ __forceinline__ void flip_signs(Vec8<T> (&raw)[2], const SignWords& flips) {
  static_assert(sizeof(T) == 2, "two elements per 32-bit word");
  uint32_t* words = reinterpret_cast<uint32_t*>(raw);
#pragma unroll
  for (int j = 0; j < 8; ++j) words[j] ^= flips.w[j];
}

// load_chunk32 of 16-bit x (16-byte aligned) with the elements' signs flipped (flip_signs).
template <typename T>
__device__ __forceinline__ void load_chunk32_flipped(const T* __restrict__ x, int64_t chunk, const SignWords& flips,
                                                     float (&v)[16]) {
  Vec8<T> raw[2];
  load_block16<T, true>(x, chunk, raw);
  flip_signs(raw, flips);
  widen16<T>(raw, v);
}

// kAmaxOnly: reduce the finite max of the rotated rowwise / columnwise groups into
// amax_bits[0] / amax_bits[1] (zeroed by the primary grid, or before the launch) and store nothing.
// kPlainPair: the common two-copy call (rowwise and columnwise, round-to-nearest, no rotation; 1D
// or 2D scales) as compile-time facts, so its instance carries no Philox or butterfly code. It is
// capped at 5 CTAs per SM: uncapped, the compiler gives it registers for fewer CTAs per SM and it
// loses its gain over the general instance (chosen by measurement: docs/recipe.md, "Speed").
// Under the cap it spills except for 16-bit x and linear scales, so the launcher uses it for
// those only.
template <typename T, bool kAligned, bool kAmaxOnly, class RowIndex, class ColIndex, bool kPlainPair = false>
__global__ void __launch_bounds__(kRecipeThreads, kPlainPair ? 5 : 0)
recipe_kernel(const T* __restrict__ x, RecipeTiles tiles, RecipeOptions opt, Nvfp4Source row_source,
              Nvfp4Source col_source, RecipeOut<RowIndex> row_out, RecipeOut<ColIndex> col_out,
              uint32_t* __restrict__ amax_bits) {
  static_assert(!(kPlainPair && kAmaxOnly), "the amax pass exists only under a rotation");
  if constexpr (kPlainPair) {
    opt.rowwise = opt.columnwise = true;
    opt.stochastic = false;
    opt.hadamard_signs = -1;
  }
  __shared__ float tile[kRecipeTileRows * kRecipeRowStride];
  // 2D: each group's max, by block column (max_of_16); the stride of 72 words keeps a warp's
  // stores (8 rows x 4 block columns) on 32 different banks.
  __shared__ alignas(16) uint32_t group_max[kRecipeTileBlocks][kRecipeTileRows + 8];
  __shared__ uint32_t scratch[32];
  __shared__ float row_table[Nvfp4TabulatedFormat::kCodes], col_table[Nvfp4TabulatedFormat::kCodes];
  Nvfp4TabulatedFormat row_format{Nvfp4Format{1.0f}, row_table}, col_format{Nvfp4Format{1.0f}, col_table};
  if constexpr (!kAmaxOnly) {
    row_format = tabulate_source(row_source, row_table, opt.rowwise);
    col_format = tabulate_source(col_source, col_table, opt.columnwise);
    __syncthreads();
  }
  const int t = threadIdx.x;
  const int tr = t / 4, tb = t % 4;  // rowwise role: row, block column
  const int cl = t / 4, sl = t % 4;  // columnwise role: column, strip
  const uint32_t signs = static_cast<uint32_t>(opt.hadamard_signs);
  const bool rotate = opt.hadamard_signs >= 0;
  // Under a rotation, 16-bit x has its rowwise flips applied as it is loaded (flip_signs), so
  // the shared tile holds x_ij s_j. A thread's columnwise group is one column c of it, so all of
  // its values carry the same extra s_c: flipping u_i by s_i s_c gives x_ic s_i.
  constexpr bool kFlipOnLoad = sizeof(T) == 2;
  const uint32_t row_signs = kFlipOnLoad ? 0u : signs;
  const uint32_t col_signs = kFlipOnLoad && (signs >> (cl % 16)) & 1u ? signs ^ 0xFFFFu : signs;
  uint32_t row_amax = 0, col_amax = 0;
  for (uint32_t unit = blockIdx.x; unit < tiles.count; unit += gridDim.x) {
    const uint32_t tile_row = tiles.col_tiles.div(unit);  // row of tiles, over all matrices
    const uint32_t ct = unit - tile_row * tiles.col_tiles.d;
    const uint32_t matrix = tiles.row_tiles.div(tile_row);
    const uint32_t rt = tile_row - matrix * tiles.row_tiles.d;
    const int64_t m = matrix;
    const int64_t r = static_cast<int64_t>(rt) * kRecipeTileRows + tr;
    const int64_t cb = static_cast<int64_t>(ct) * kRecipeTileBlocks + tb;
    const bool valid = r < tiles.rows && cb < tiles.nb;
    Vec8<T> raw[2] = {};  // zeros past the matrix
    if (valid) {
      load_block16<T, kAligned>(x + (m * tiles.rows + r) * tiles.k, cb, raw);
      if constexpr (kFlipOnLoad) {
        if (rotate) flip_signs(raw, opt.sign_words);
      }
    }
    float v[16];
    widen16<T>(raw, v);
    const uint32_t loaded_max = loaded_max_bits(raw);  // the rowwise block max without a rotation
    if (opt.block_2d) group_max[tb][tr] = loaded_max;
    if (opt.columnwise) {
#pragma unroll
      for (int i = 0; i < 16; ++i) tile[tr * kRecipeRowStride + tb * 16 + i] = v[i];
    }
    const bool shared = opt.block_2d || opt.columnwise;
    if (shared) __syncthreads();
    // The max of the 16x16 tile (16-row strip `strip` of this tile, block column `block`).
    const auto tile_max = [&](int strip, int block) { return max_of_16(&group_max[block][strip * 16]); };
    if (opt.rowwise) {
      if (rotate) hadamard16(v, row_signs);
      if constexpr (kAmaxOnly) {
        row_amax = max(row_amax, finite_max_bits16(v));
      } else if (valid) {
        const int64_t b = (m * tiles.rows + r) * tiles.nb + cb;
        store_block(row_out, b, row_out.index.offset(b, m, r, cb), v,
                    opt.block_2d ? tile_max(tr / 16, tb) : rotate ? max_abs_bits(v) : loaded_max, row_format, opt,
                    false);
      }
    }
    if (opt.columnwise) {  // rows are a multiple of 16 here: a strip is whole or past the end
      const int64_t c = static_cast<int64_t>(ct) * 64 + cl;
      const int64_t s = static_cast<int64_t>(rt) * 4 + sl;
      const bool valid_column = c < tiles.k && s < tiles.strips;
      float u[16];
#pragma unroll
      for (int i = 0; i < 16; ++i) u[i] = tile[(sl * 16 + i) * kRecipeRowStride + cl];
      if (rotate) hadamard16(u, col_signs);
      if constexpr (kAmaxOnly) {
        if (valid_column) col_amax = max(col_amax, finite_max_bits16(u));
      } else if (valid_column) {
        const int64_t b = (m * tiles.k + c) * tiles.strips + s;
        store_block(col_out, b, col_out.index.offset(b, m, c, s), u,
                    opt.block_2d ? tile_max(sl, cl / 16) : max_abs_bits(u), col_format, opt, true);
      }
    }
    if (shared) __syncthreads();  // the next tile reuses shared memory
  }
  if constexpr (kAmaxOnly) {
    row_amax = block_reduce_max(row_amax, scratch);
    col_amax = block_reduce_max(col_amax, scratch);
    wait_for_primary_grid();  // the words' zeroing (launch_behind_zeroing, recipe.cu)
    if (t == 0 && row_amax != 0) atomicMax(amax_bits, row_amax);
    if (t == 0 && col_amax != 0) atomicMax(amax_bits + 1, col_amax);
  }
}

// Rowwise only, 1D scales, 16-bit x (the rotation and stochastic rounding are per block): one
// thread per 16-element block, as in the plain quantizer, so a warp reads 1 KiB and stores
// 256 code bytes and 32 scale bytes, each sector-complete (the tile kernel's warp spans 8 rows and
// touches 8 scale sectors). Same block index b, rotation and encoding as recipe_kernel, hence
// the same bits. kAmaxOnly: reduce the rotated finite max into amax_bits[0] and store nothing.
// One instance per kind of rotation, so the options without one carry none of its code.
// Transformer Engine's sign vector (the default) is a compile-time constant there, so its sign
// flips become operand negations of the butterfly's first additions instead of instructions of
// their own; other signs flip the packed inputs as they are loaded (load_chunk32_flipped) where
// x is 16-byte aligned.
enum class Rotation { kNone, kTeSigns, kRuntimeSigns };

template <typename T, bool kAligned, bool kAmaxOnly, Rotation kRotation, class ScaleIndex>
__global__ void __launch_bounds__(kRecipeThreads)
recipe_rowwise_kernel(const T* __restrict__ x, int64_t num_blocks, RecipeOptions opt, Nvfp4Source source,
                      RecipeOut<ScaleIndex> out, uint32_t* __restrict__ amax_bits) {
  static_assert(kElemsPer32Bytes<T> == 16, "one 16-element block per 32-byte chunk");
  __shared__ uint32_t scratch[32];
  __shared__ float table[Nvfp4TabulatedFormat::kCodes];
  Nvfp4TabulatedFormat format{Nvfp4Format{1.0f}, table};
  if constexpr (!kAmaxOnly) {
    format = tabulate_source(source, table);
    __syncthreads();
  }
  constexpr bool kFlipOnLoad = kAligned && kRotation == Rotation::kRuntimeSigns;
  const uint32_t signs = kRotation == Rotation::kTeSigns ? kTeHadamardSigns
                         : kFlipOnLoad                   ? 0u
                                                         : static_cast<uint32_t>(opt.hadamard_signs);
  uint32_t amax = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t u = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; u < num_blocks; u += stride) {
    const int64_t b = out.index.block_at(u);
    float v[16];
    uint32_t max_bits = 0;
    if constexpr (kRotation == Rotation::kNone) {
      Vec8<T> raw[2];
      load_block16<T, kAligned>(x, b, raw);
      widen16<T>(raw, v);
      max_bits = max_abs_bits16(raw);
    } else {
      if constexpr (kFlipOnLoad) {
        load_chunk32_flipped(x, b, opt.sign_words, v);
      } else {
        load_chunk32<T, kAligned>(x, b, v);
      }
      hadamard16(v, signs);
      max_bits = max_abs_bits(v);
    }
    if constexpr (kAmaxOnly) {
      amax = max(amax, finite_max_bits16(v));
    } else {
      store_block(out, b, out.index.scale_at(u, b), v, max_bits, format, opt, false);
    }
  }
  if constexpr (kAmaxOnly) {
    amax = block_reduce_max(amax, scratch);
    wait_for_primary_grid();  // the words' zeroing (launch_behind_zeroing, recipe.cu)
    if (threadIdx.x == 0 && amax != 0) atomicMax(amax_bits, amax);
  }
}

// Rowwise only with 16x16 block scales (no rotation: the op rejects 2D with Hadamard). Work unit:
// 16 rows (one 2D strip) x 32 block columns of one matrix for a CTA of 16 warps. Warp w takes row
// w of the strip, lane l block column l, so each warp reads 1 KiB (bf16) and stores 256 code bytes
// and 32 scale bytes, all whole sectors, as the plain quantizer's warps do; the 64 x 64 tile
// kernel's warps span 8 rows and write a quarter sector of scales per row (docs/recipe.md). The
// lanes' block maxima meet in shared memory, where after one barrier each lane takes the max of
// its block column. Two buffers of maxima make that the only barrier per unit, and the next unit's
// elements are loaded into registers before it, so the barrier's wait overlaps the memory latency.
// One unit ahead, in registers, is the prefetch chosen by measurement (docs/recipe.md, "Speed").
constexpr int kStripRows = 16;
constexpr int kStripBlocks = 32;
constexpr int kStripThreads = kStripRows * 32;
// The maxima are stored by block column, a column's 16 rows contiguous, so a lane reads its column
// with four 16-byte loads instead of 16 word loads. The padded stride (20 words, a multiple of 4
// for the 16-byte loads) spreads any 8 lanes' loads over all 32 banks; the 32 lanes' word stores
// then meet 4-way bank conflicts, one store per block.
constexpr int kStripMaxStride = 20;

struct StripUnits {
  int64_t rows;           // per matrix
  int64_t nb;             // k / 16 blocks per row
  FastDivU32 col_chunks;  // ceil(nb / 32) units per strip
  FastDivU32 strips;      // ceil(rows / 16) strips per matrix
  uint32_t count;         // matrices * strips * col_chunks (the launcher keeps it below 2^31)
};

// This thread's block of unit u: matrix m, row r, block column cb, linear block index b.
struct StripBlock {
  int64_t b, m, r, cb;
  bool valid;  // u is a unit and (r, cb) lies inside the matrix
};

__device__ __forceinline__ StripBlock strip_block(const StripUnits& units, uint32_t u, int row, int lane) {
  const uint32_t strip = units.col_chunks.div(u);  // over all matrices
  const uint32_t chunk = u - strip * units.col_chunks.d;
  const uint32_t m = units.strips.div(strip);
  const int64_t r = static_cast<int64_t>(strip - m * units.strips.d) * kStripRows + row;
  const int64_t cb = static_cast<int64_t>(chunk) * kStripBlocks + lane;
  return {(m * units.rows + r) * units.nb + cb, m, r, cb, u < units.count && r < units.rows && cb < units.nb};
}

// The strip kernels' body. kStochastic: opt.stochastic as a compile-time constant, one kernel per
// rounding mode, so the round-to-nearest kernel is compiled without the stochastic path's register
// demand (chosen by measurement: docs/recipe.md, "Speed").
template <typename T, bool kAligned, bool kStochastic, class ScaleIndex>
__device__ __forceinline__ void quantize_strips(const T* __restrict__ x, const StripUnits& units, RecipeOptions opt,
                                                const Nvfp4Source& source, const RecipeOut<ScaleIndex>& out) {
  opt.stochastic = kStochastic;
  __shared__ alignas(16) uint32_t block_max[2][kStripBlocks][kStripMaxStride];
  __shared__ float table[Nvfp4TabulatedFormat::kCodes];
  const Nvfp4TabulatedFormat format = tabulate_source(source, table);
  __syncthreads();
  const int row = threadIdx.x / 32, lane = threadIdx.x % 32;
  StripBlock block = strip_block(units, blockIdx.x, row, lane);
  // The 16 elements of `block`, loaded one unit ahead; zeros for a block outside the matrix, so
  // that it adds nothing to its tile's max.
  Vec8<T> raw[2] = {};
  if (block.valid) load_block16<T, kAligned>(x, block.b, raw);
  int buffer = 0;
  for (uint32_t u = blockIdx.x; u < units.count; u += gridDim.x, buffer ^= 1) {
    float v[16];
    widen16<T>(raw, v);
    const uint32_t own_max = loaded_max_bits(raw);
    const StripBlock next = strip_block(units, u + gridDim.x, row, lane);
    if (next.valid) {
      load_block16<T, kAligned>(x, next.b, raw);
    } else {
      raw[0] = raw[1] = Vec8<T>{};
    }
    block_max[buffer][lane][row] = own_max;
    __syncthreads();  // a unit's maxima are read only here; the other buffer is written next
    // max_of_16, written out: calling it here changes this kernel's instruction scheduling for the
    // worse (docs/recipe.md, "Speed").
    const uint4* column = reinterpret_cast<const uint4*>(block_max[buffer][lane]);
    uint32_t tile_max = 0;
#pragma unroll
    for (int i = 0; i < kStripRows / 4; ++i) {
      const uint4 q = column[i];
      tile_max = max(max(tile_max, q.x), max(q.y, max(q.z, q.w)));
    }
    if (block.valid) {
      store_block(out, block.b, out.index.offset(block.b, block.m, block.r, block.cb), v, tile_max, format, opt, false);
    }
    block = next;
  }
}

template <typename T, bool kAligned, bool kStochastic, class ScaleIndex>
__global__ void __launch_bounds__(kStripThreads)
recipe_rowwise_2d_kernel(const T* __restrict__ x, StripUnits units, RecipeOptions opt, Nvfp4Source source,
                         RecipeOut<ScaleIndex> out) {
  quantize_strips<T, kAligned, kStochastic>(x, units, opt, source, out);
}

// The same for bf16 x, linear scales and round-to-nearest, capped at 3 CTAs of 512 threads per
// SM, which this instance fits without spilling: the kernel is latency-bound, and more CTAs per
// SM hide more of it (chosen by measurement: docs/recipe.md, "Speed"). Under the cap the other
// dtypes, the swizzled layout and stochastic rounding spill, so they keep the kernel above.
template <bool kAligned>
__global__ void __launch_bounds__(kStripThreads, 3)
recipe_rowwise_2d_bf16_kernel(const __nv_bfloat16* __restrict__ x, StripUnits units, RecipeOptions opt,
                              Nvfp4Source source, RecipeOut<LinearScales> out) {
  quantize_strips<__nv_bfloat16, kAligned, false>(x, units, opt, source, out);
}

}  // namespace fp4ops::cuda
