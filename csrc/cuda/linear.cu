// Launcher for fp4ops.linear: checks, device guard, current stream, and the dispatch between the
// tensor-core kernel family (linear_mma.cuh; on Hopper at 17-128 rows: linear_wgmma.cuh) and
// dequantize + cuBLAS.
//
// Rule (docs/performance.md, "Linear: dispatch and bounds"): up to kLinearMaxTokens rows of x (128
// on the warpgroup MMA where its grids suit them: linear_row_bounds), and any number of rows when the
// caller asks for batch invariance, run the kernel family (more rows: one CTA row chunk of 64 or 128
// per blockIdx.z, the weight read and decoded once per chunk; small grids split fewer rows into
// chunks too: linear_column_tiles); above that, and for K not a multiple of 128, the weight is
// dequantized and multiplied by cuBLAS (dequantize + F.linear): past a chunk the family decodes the
// weight once per chunk while cuBLAS reads it once.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>

#include <algorithm>
#include <limits>

#include "../common/op_checks.h"
#include "kernels_cuda.h"
#include "launch_utils.h"
#include "linear_mma.cuh"
#include "linear_wgmma.cuh"

namespace fp4ops::cuda {

namespace {

// CTAs of a grid of 8-warp CTAs over `tiles` 16-row weight tiles, K ranges and row chunks.
int64_t eight_warp_ctas(int64_t tiles, int splits, int64_t row_chunks) { return (tiles + 7) / 8 * splits * row_chunks; }

// Warps (16 weight rows each) per CTA: 8, so that a CTA's copy of x serves 128 rows, or 4 where 8
// would leave SMs without a CTA (small N). The summation order does not depend on it.
int linear_warps_per_cta(int64_t tiles, int splits, int64_t row_chunks) {
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  return eight_warp_ctas(tiles, splits, row_chunks) < sms ? 4 : 8;
}

// With one column tile (at most 8 rows of x), also 4 where the 8-warp grid fills less than 4/5 of
// the SMs in its last round (192 CTAs put 16 warps on 60 SMs and 8 on 72): the launchers spread a
// one-wave grid ceil(CTAs / SMs) to an SM (spreading_dynamic_smem), and where the loop is
// issue-bound the SMs with the most warps set the kernel's time; elsewhere twice the CTAs, each
// staging x, cost more than the balance gains. Measurements: docs/performance.md, "Linear:
// dispatch and bounds".
int linear_warps_per_cta_one_tile(int64_t tiles, int splits, int64_t row_chunks) {
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int64_t ctas8 = eight_warp_ctas(tiles, splits, row_chunks), busiest8 = (ctas8 + sms - 1) / sms;
  return ctas8 < sms || ctas8 * 5 < busiest8 * sms * 4 ? 4 : 8;
}

// K ranges per output (gridDim.y): a function of N and K only, so that the summation order, and
// with it every row's result, does not depend on the number of rows (batch invariance) nor on the
// GPU. Fewer, longer ranges run faster while the grid keeps enough warps: each warp fills its ring
// and stages its x once per range, and there are fewer partial sums to add; and a grid past
// kWarpsWanted warps (about one wave at the long-range cap on CTAs an SM, linear_ctas_per_sm_cap)
// runs a second, partial wave. So where the count nearest to kWarpsWanted warps of the weight's
// 16-row tiles keeps the grid within kWarpsWanted warps and its ranges within kLongestWithinTarget
// steps (kLongestSingleRange for one range, which has no partial sums to add), that count, even
// where it does not divide the steps (unequal ranges cost nothing measurable). One range only where
// the tiles alone come to 5/6 of kWarpsWanted: fewer warps over such long ranges ran slower at
// 4-16 rows. Elsewhere the nearest count, or more where ranges would exceed kLongestRange steps of
// 128 elements; but never more than kMostWarps warps' worth, and each range at least
// kMinStepsPerRange steps (so each warp's ring runs full for a while), or kShortStepsPerRange where
// the longer ranges would give fewer than kMinWarps warps (small N); then raised to the next count
// that divides the steps, where one does up to the minimum range length's bound (past kMostWarps'
// if need be: 28672 x 8192 takes 4 equal ranges, not 3 of 21-22 steps). docs/performance.md,
// "Linear: dispatch and bounds", has the measurements.
int linear_splits(int64_t n, int64_t steps) {
  constexpr int64_t kWarpsWanted = 2048, kMostWarps = 4096, kMinWarps = 512;
  constexpr int64_t kMinStepsPerRange = 8, kShortStepsPerRange = 4, kLongestRange = 28;
  constexpr int64_t kLongestWithinTarget = 40, kLongestSingleRange = 56;
  const int64_t tiles = (n + kLinearTileRows - 1) / kLinearTileRows;
  const int64_t nearest = (2 * kWarpsWanted + tiles) / (2 * tiles);  // kWarpsWanted / tiles, rounded
  int64_t most = std::max<int64_t>(1, steps / kMinStepsPerRange);
  if (tiles * most < kMinWarps) most = std::max(most, steps / kShortStepsPerRange);
  const bool one_range_fills = 6 * tiles >= 5 * kWarpsWanted;
  if (nearest >= 1 && nearest <= most && nearest * tiles <= kWarpsWanted && (nearest > 1 || one_range_fills)) {
    const int64_t longest = nearest == 1 ? kLongestSingleRange : kLongestWithinTarget;
    if ((steps + nearest - 1) / nearest <= longest) return static_cast<int>(nearest);
  }
  const int64_t wanted = std::max(nearest, (steps + kLongestRange - 1) / kLongestRange);
  const int64_t splits = std::clamp<int64_t>(wanted, 1, std::min(most, (kMostWarps + tiles - 1) / tiles));
  for (int64_t equal = splits; equal <= most; ++equal) {
    if (steps % equal == 0) return static_cast<int>(equal);
  }
  return static_cast<int>(splits);
}

// K range steps at least for a second row chunk of the same weight: shorter ranges pay each
// chunk's x staging and ring fill for little work.
constexpr int kLongRangeSteps = 8;

// Column tiles of 8 rows per CTA for `rows` rows of x: the smallest power of two that holds them,
// at most max_tiles (8, or 16 on the warpgroup MMA).
int column_tiles(int64_t rows, int max_tiles) {
  return rows <= 8 ? 1 : rows <= 16 ? 2 : rows <= 32 ? 4 : rows <= 64 || max_tiles == 8 ? 8 : 16;
}

// Column tiles per CTA for M rows of x: column_tiles(M, max_tiles) (max_tiles past 8 max_tiles
// rows, the rest in further row chunks), except that small grids split 33-64 rows into two row
// chunks of 4 tiles (gridDim.z), each with x resident where it fits. Each chunk reads the weight
// (the second read mostly from L2: the chunks' CTAs run together) and decodes it, but the grid has
// twice the warps, and the 4-tile kernel spends fewer instructions per weight byte on the MMAs' B
// operands. Where it pays (docs/performance.md, "Linear: dispatch and bounds"): where the one-chunk
// grid has under kFewWarpsPerSm warps of 16 weight rows per SM, with K ranges of at least
// kLongRangeSteps steps (shorter ranges pay the second chunk's staging and ring fill for little
// work). The summation order does not depend on the rows, so neither does any row's result.
int linear_column_tiles(int64_t m, int64_t n, int splits, int range_steps, int max_tiles) {
  constexpr int64_t kFewWarpsPerSm = 6;
  const int tiles = column_tiles(m, max_tiles);
  if (tiles != 8 || m > kLinearMaxTokens) return tiles;
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int64_t warps = (n + kLinearTileRows - 1) / kLinearTileRows * splits;
  return warps < kFewWarpsPerSm * sms && range_steps >= kLongRangeSteps ? 4 : 8;
}

// `tiles` column tiles as a compile-time constant for fn.
template <typename Fn>
void with_column_tiles(int tiles, Fn&& fn) {
  switch (tiles) {
    case 1: return fn(std::integral_constant<int, 1>{});
    case 2: return fn(std::integral_constant<int, 2>{});
    case 4: return fn(std::integral_constant<int, 4>{});
    default: return fn(std::integral_constant<int, 8>{});
  }
}

// Whether the warpgroup-MMA kernels (linear_wgmma.cuh) serve `column_tiles`
// tiles per CTA: 4, 8 or 16 (17-128 rows), on compute capability 9.0, from a build with an sm_90a pass
// (csrc/common/arch.h). They add the same products in the same order as the mma.sync kernels, so
// the choice changes no bits. With 2 tiles (9-16 rows) they measured slower: one wgmma of 16 columns
// costs a warpgroup about what its four warps' mma.sync cost (docs/performance.md, "Linear:
// dispatch and bounds").
bool linear_wgmma(int column_tiles, int device) {
#if defined(FP4OPS_BUILD_HAS_SM90A)
  const cudaDeviceProp* prop = at::cuda::getDeviceProperties(device);
  return prop->major == 9 && prop->minor == 0 && column_tiles >= 4;
#else
  (void)column_tiles, (void)device;
  return false;
#endif
}

// The kernel family's row bounds for an N x K weight: a CTA row chunk's column tiles at most
// (chunk_tiles, 8 rows each) and the rows that a call without batch_invariant runs on the family
// (family_rows; more go to dequantize + cuBLAS). On the warpgroup MMA, 65-128 rows run there too
// where the family has a grid for them: one chunk of 16 tiles (one CTA per SM) where the grid of
// 8-warp CTAs fills the SMs at least once (its 128-row CTAs take 12 warps where that saves a wave:
// linear_wgmma_128_row_warps; below 1.5 waves always); else two chunks of 8 tiles where both fit
// one wave of two CTAs an SM with K ranges of at least kLongRangeSteps steps (the second chunk's
// weight read mostly from L2, as the first's CTAs run beside it; shorter ranges pay each chunk's
// staging and ring fill for little work). Below those both measured slower than dequantize +
// cuBLAS (docs/performance.md, "Linear: dispatch and bounds"). A function of N, K and the GPU
// only; the chunks' size changes no bits (the summation order never depends on the rows).
struct LinearRowBounds {
  int chunk_tiles;
  int64_t family_rows;
};

LinearRowBounds linear_row_bounds(int64_t n, int splits, int range_steps, int device) {
  const int64_t sms = at::cuda::getDeviceProperties(device)->multiProcessorCount;
  const int64_t tiles = (n + kLinearTileRows - 1) / kLinearTileRows;
  if (linear_wgmma(16, device) && eight_warp_ctas(tiles, splits, 1) >= sms) {
    return {kLinearWgmmaMaxTokens / 8, kLinearWgmmaMaxTokens};
  }
  const bool two_chunks_in_one_wave =
      linear_wgmma(8, device) && eight_warp_ctas(tiles, splits, 2) <= 2 * sms && range_steps >= kLongRangeSteps;
  return {kLinearMaxTokens / 8, two_chunks_in_one_wave ? kLinearWgmmaMaxTokens : kLinearMaxTokens};
}

// Resident x (LinearLayout::kXResident) where a CTA's row chunk of dense x has at most 32 rows and
// their K range (with the zeroed row that the column tiles' rows past M read) fits kResidentXBytes:
// next to the rings of 8 warps (32 KB of codes, 8 KB of scales), two CTAs still fit an SM (228 KB,
// 1 KB of it reserved per CTA). Both kernels add the same products in the same order, so the
// choice, made from M, does not change any row's result.
constexpr size_t kResidentXBytes = 72 * 1024;
// Whether `rows` rows of 16-bit x over a K range of `range_steps` steps fit kResidentXBytes.
bool resident_x_fits(int64_t rows, int range_steps) {
  return static_cast<size_t>(rows) * range_steps * kLinearStepElems * 2 <= kResidentXBytes;
}

bool resident_x(const LinearArgs& args, int column_tiles) {
  const int64_t chunk_rows = 8 * column_tiles, live = std::min(args.m, chunk_rows);
  return chunk_rows <= 32 && resident_x_fits(live + (live < chunk_rows ? 1 : 0), args.range_steps);
}

// Steps of each warp's range prefetched to L2 before the grid dependency wait: the whole grid's
// prefetch kept to kPrefetchBytes of L2 (a fraction of it, so the layer before keeps its lines),
// and at least the ring's first fill.
int linear_prefetch_steps(int64_t n, int splits) {
  constexpr int64_t kPrefetchBytes = 16 << 20;
  return static_cast<int>(std::clamp<int64_t>(kPrefetchBytes / (n * splits * 64), kLinearStages - 1, 32));
}

// Whether dense x must arrive in the decoders' pairing (linear_permute_x_kernel): staged per step,
// past one column tile per CTA (LinearLayout::kXPermuted); resident, past one column tile unless it
// is at most two and the CTA's K range at most kPairInPlaceSteps steps. There each CTA pairs its rows in
// place (at most 16 x 8 x 16 chunks), quicker than the launch; with longer ranges the pairing
// delays every CTA's main loop by more than the launch costs. Resident x that does not arrive
// paired (LinearArgs::x_paired) is paired in place.
constexpr int kPairInPlaceSteps = 8;
bool x_must_arrive_paired(const LinearArgs& args, int column_tiles, bool resident) {
  if (resident && column_tiles <= 2 && args.range_steps <= kPairInPlaceSteps) return false;
  return column_tiles > 1;
}

// CTAs per SM at most, where registers and shared memory would admit 4-5 CTAs of 8 warps on large
// grids. For two column tiles, and for one with resident x at up to kFewRows rows: 32 warps where
// the grid has more CTAs than that many warps an SM hold and its K ranges are short (under
// kLongRange steps: CTAs whose ring fill and x staging weigh most, which more CTAs side by side
// overlap); 16 for one tile over ranges of kVeryLongRange steps and more; else 24. With fewer, a
// grid that more warps would run in one wave runs in more than one, so the CTAs of an SM start and
// finish apart, not all in step (ring fills together, then main loops together), and the loop runs
// faster than with more warps. Uncapped: one tile at 5-8 rows, where each CTA stages 9 rows of x
// and the further wave costs more than that gains on some layers, and one tile with x staged per
// step (ranges too long for resident x), which ran slower capped. No effect on the bits.
// Measurements: docs/performance.md, "Linear: dispatch and bounds".
int linear_ctas_per_sm_cap(int column_tiles, bool resident, int64_t m, int warps, int64_t ctas, int range_steps, int device) {
  constexpr int64_t kFewRows = 4;
  constexpr int kLongRange = 16, kVeryLongRange = 24, kManyWarps = 32, kFewWarps = 24, kFewestWarps = 16;
  if (column_tiles > 2 || (column_tiles == 1 && (!resident || m > kFewRows))) return std::numeric_limits<int>::max();
  const int64_t sms = at::cuda::getDeviceProperties(device)->multiProcessorCount;
  if (ctas > kManyWarps / warps * sms && range_steps < kLongRange) return kManyWarps / warps;
  return (column_tiles == 1 && range_steps >= kVeryLongRange ? kFewestWarps : kFewWarps) / warps;
}

template <class Format, typename XT, int kNt, bool kResident, bool kRowChunks = false>
void launch_linear_kernel(LinearArgs args, cudaStream_t stream, int device) {
  using Layout = LinearLayout<Format, XT, kNt, kResident, kRowChunks>;
  const auto kernel = linear_mma_kernel<Format, XT, kNt, kResident, kRowChunks>;
  const int64_t tiles = (args.n + kLinearTileRows - 1) / kLinearTileRows, row_chunks = (args.m + Layout::kTokens - 1) / Layout::kTokens;
  if constexpr (kResident) args.live_tokens = static_cast<int>(std::min<int64_t>(args.m, Layout::kTokens));  // the most a CTA stages
  const int warps =
      kNt == 1 ? linear_warps_per_cta_one_tile(tiles, args.splits, row_chunks) : linear_warps_per_cta(tiles, args.splits, row_chunks);
  size_t smem = Layout::resident_smem_bytes(warps, args.live_tokens, args.range_steps);
  const dim3 grid(static_cast<unsigned>((tiles + warps - 1) / warps), static_cast<unsigned>(args.splits), static_cast<unsigned>(row_chunks));
  const int64_t ctas = static_cast<int64_t>(grid.x) * grid.y * grid.z;
  const int cap = linear_ctas_per_sm_cap(kNt, kResident, args.m, warps, ctas, args.range_steps, device);
  smem = spreading_dynamic_smem(kernel, warps * 32, smem, ctas, device, cap);
  launch_dependent(kernel, grid, warps * 32, smem, stream, args);
}

// The torch dtype of dense x of type T (fp16 or bf16).
template <typename T>
constexpr at::ScalarType dense_dtype() {
  static_assert(std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>, "dense x is fp16 or bf16");
  return std::is_same_v<T, __half> ? at::kHalf : at::kBFloat16;
}

// Each kernel runs as the programmatic dependent of the one before it (launch_dependent), and
// lets the one after it launch once all its CTAs run: dense x is permuted into the decoders'
// pairing where it must arrive paired (x_must_arrive_paired; FP4 x is decoded by
// linear_decode_x_kernel) while the linear kernel's CTAs
// start and prefetch their weight to L2; then (launch_mma) the reduction of the K ranges
// (linear_reduce_kernel) waits for the linear kernel, and the next layer's kernel prefetches its
// own weight meanwhile.
template <class Format, typename XT>
void launch_mma_kernels(LinearArgs args, int column_tiles, const at::TensorOptions& options, cudaStream_t stream, int device) {
  at::Tensor paired;
  const bool resident = resident_x(args, column_tiles);
  if (!args.x_paired && x_must_arrive_paired(args, column_tiles, resident)) {
    paired = at::empty({args.m, args.k}, options.dtype(dense_dtype<XT>()));
    const int64_t chunks = args.m * args.k / 8;
    launch_dependent(linear_permute_x_kernel<XT>, grid_for(chunks, 256), 256, stream, static_cast<const uint4*>(args.x),
                     static_cast<uint4*>(paired.mutable_data_ptr()), chunks);
    args.x = paired.const_data_ptr();
    args.x_paired = true;
  }
  with_column_tiles(column_tiles, [&](auto tiles_tag) {
    constexpr int kNt = decltype(tiles_tag)::value;
    if constexpr (kNt <= 4) {
      // Resident x in several row chunks only ever has 4 tiles (linear_column_tiles).
      if constexpr (kNt == 4) {
        if (resident && args.m > 8 * kNt) return launch_linear_kernel<Format, XT, kNt, true, true>(args, stream, device);
      }
      if (resident) return launch_linear_kernel<Format, XT, kNt, true>(args, stream, device);
    }
    launch_linear_kernel<Format, XT, kNt, false>(args, stream, device);
  });
}

// The dense x the kernels take for x of type XT (uint8_t: FP4 x, decoded first), and FP4 x's
// decoder (linear_mma.cuh: PrescaledNvfp4XChunk, ExactMxfp4XChunk).
template <class Format, typename XT>
using DenseX = std::conditional_t<!std::is_same_v<XT, uint8_t>, XT,
                                  std::conditional_t<std::is_same_v<Format, Nvfp4Format>, __half, __nv_bfloat16>>;
template <class Format>
using XChunk = std::conditional_t<std::is_same_v<Format, Nvfp4Format>, PrescaledNvfp4XChunk, ExactMxfp4XChunk>;
// Whether XChunk<Format>'s dense x carries its block scales (NVFP4: prescaled; MXFP4: exact values).
template <class Format>
constexpr bool kDecodedXPrescaled = std::is_same_v<Format, Nvfp4Format>;

// Warps per CTA of a 128-row wgmma kernel built for three warpgroups (kLinearWgmmaMaxWarps),
// 12 or 8, its CTAs one per SM either way. A 12-warp CTA shares each x stage's staging and its ring
// fill among 1.5x the weight rows, and takes about 4/3 the time of an 8-warp one: less where the K
// ranges are short (those shared costs weigh more), more where they are long. So 12 where 4 times
// its grid's waves is under 3 times the 8-warp grid's, or equal with ranges of at most
// kShortRangeSteps steps; else 8. Measurements: docs/performance.md, "Linear: dispatch and bounds".
int linear_wgmma_128_row_warps(int64_t tiles, int splits, int64_t row_chunks, int range_steps, int device) {
  constexpr int kShortRangeSteps = 16;
  const int64_t sms = at::cuda::getDeviceProperties(device)->multiProcessorCount;
  const auto waves = [&](int warps) { return ((tiles + warps - 1) / warps * splits * row_chunks + sms - 1) / sms; };
  const int64_t twelve = 4 * waves(12), eight = 3 * waves(8);
  return twelve < eight || (twelve == eight && range_steps <= kShortRangeSteps) ? 12 : 8;
}

// Warps per CTA of a 64-row wgmma kernel (built for up to 16 at the register cap of two 8-warp CTAs
// an SM: kLinearWgmmaMaxWarps): 12, one CTA an SM, where the 8-warp grid would put two CTAs on some
// SMs and one on the others (more CTAs than SMs, fewer than two an SM) and the 12-warp grid is one
// wave: the SMs with two CTAs set the time, and one 12-warp CTA on each SM does the same work in
// less (its x stage serves 1.5x the weight rows). Else linear_warps_per_cta's 8 or 4. Measurements:
// docs/performance.md, "Linear: dispatch and bounds".
int linear_wgmma_64_row_warps(int64_t tiles, int splits, int64_t row_chunks) {
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int64_t ctas8 = eight_warp_ctas(tiles, splits, row_chunks), ctas12 = (tiles + 11) / 12 * splits * row_chunks;
  return sms < ctas8 && ctas8 < 2 * sms && ctas12 <= sms ? 12 : linear_warps_per_cta(tiles, splits, row_chunks);
}

// One warpgroup-MMA kernel: CTAs of one or two warpgroups (linear_warps_per_cta's 4 or 8 warps; two
// or three at 64 and 128 rows: linear_wgmma_64_row_warps, linear_wgmma_128_row_warps), the K ranges
// and row chunks as for the mma.sync kernels, shared memory as LinearWgmmaLayout lays it out. The
// warps per CTA change no bits.
template <class Format, typename XT, int kNt, bool kResident>
void launch_wgmma_kernel(const LinearArgs& args, cudaStream_t stream, int device) {
  using Layout = LinearWgmmaLayout<Format, XT, kNt, kResident>;
  const auto kernel = linear_wgmma_kernel<Format, XT, kNt, kResident>;
  const int64_t tiles = (args.n + kLinearTileRows - 1) / kLinearTileRows, row_chunks = (args.m + Layout::kTokens - 1) / Layout::kTokens;
  const int warps = kNt == 16  ? linear_wgmma_128_row_warps(tiles, args.splits, row_chunks, args.range_steps, device)
                    : kNt == 8 ? linear_wgmma_64_row_warps(tiles, args.splits, row_chunks)
                               : linear_warps_per_cta(tiles, args.splits, row_chunks);
  const dim3 grid(static_cast<unsigned>((tiles + warps - 1) / warps), static_cast<unsigned>(args.splits), static_cast<unsigned>(row_chunks));
  const size_t smem = spreading_dynamic_smem(kernel, warps * 32, Layout::smem_bytes(warps, args.range_steps),
                                             static_cast<int64_t>(grid.x) * grid.y * grid.z, device);
  launch_dependent(kernel, grid, warps * 32, smem, stream, args);
}

// The warpgroup-MMA kernels for x of type XT (uint8_t: FP4 x): x into their
// x image (FP4 x decoded on the way), then the kernel, with x resident where a CTA's rows and K
// range fit kResidentXBytes (as for the mma.sync kernels: the bits do not depend on it).
template <class Format, typename XT>
void launch_wgmma(LinearArgs args, int column_tiles, const at::TensorOptions& options, cudaStream_t stream, int device) {
  using DenseT = DenseX<Format, XT>;
  const int tokens = 8 * column_tiles;
  const int64_t rows = (args.m + tokens - 1) / tokens * tokens;
  const at::Tensor x_image = at::empty({rows, args.k}, options.dtype(dense_dtype<DenseT>()));
  const WgmmaXImage image{static_cast<uint8_t*>(x_image.mutable_data_ptr()), args.m, args.steps, tokens};
  if constexpr (std::is_same_v<XT, uint8_t>) {
    launch_dependent(linear_decode_x_image_kernel<XChunk<Format>>, grid_for(rows * args.k / 8, 256), 256, stream,
                     static_cast<const uint32_t*>(args.x), args.x_scales, image);
    args.x_prescaled = kDecodedXPrescaled<Format>;
    args.x_scales = nullptr;
  } else {
    launch_dependent(linear_wgmma_x_image_kernel<XT>, grid_for(rows * args.k / 32, 256), 256, stream,
                     static_cast<const uint4*>(args.x), image);
  }
  args.x = x_image.const_data_ptr();
  const bool resident = tokens <= 32 && resident_x_fits(tokens, args.range_steps);
  if (column_tiles == 16) return launch_wgmma_kernel<Format, DenseT, 16, false>(args, stream, device);
  if (column_tiles == 8) return launch_wgmma_kernel<Format, DenseT, 8, false>(args, stream, device);
  if (resident) return launch_wgmma_kernel<Format, DenseT, 4, true>(args, stream, device);
  launch_wgmma_kernel<Format, DenseT, 4, false>(args, stream, device);
}

// `args` with the dense x `decoded` ([M, K], in the decoders' pairing where `paired`) in place of
// the FP4 x it was decoded from.
LinearArgs with_decoded_x(LinearArgs args, const at::Tensor& decoded, bool paired) {
  args.x = decoded.const_data_ptr();
  args.x_scales = nullptr;
  args.x_paired = paired;
  return args;
}

// The mma.sync kernels for x of type XT (uint8_t: FP4 x). FP4 x is decoded once into the dense x
// (XChunk: NVFP4 as prescaled fp16, MXFP4 as its exact bf16 values) whose B values the kernels would
// otherwise build from it in every warp, in the pairing (free there, and no resident kernel pairs
// it again) except for one column tile staged per step, which pairs x as it loads it.
template <class Format, typename XT>
void launch_mma_sync(LinearArgs args, int column_tiles, const at::TensorOptions& options, cudaStream_t stream, int device) {
  using DenseT = DenseX<Format, XT>;
  if constexpr (std::is_same_v<XT, uint8_t>) {
    const bool pairing = column_tiles > 1 || resident_x(args, column_tiles);
    const int64_t chunks = args.m * args.k / 8;
    const at::Tensor decoded = at::empty({args.m, args.k}, options.dtype(dense_dtype<DenseT>()));
    launch_dependent(pairing ? linear_decode_x_kernel<XChunk<Format>, true> : linear_decode_x_kernel<XChunk<Format>, false>,
                     grid_for(chunks, 256), 256, stream, static_cast<const uint32_t*>(args.x), args.x_scales,
                     static_cast<uint4*>(decoded.mutable_data_ptr()), chunks);
    LinearArgs dense = with_decoded_x(args, decoded, pairing);
    dense.x_prescaled = kDecodedXPrescaled<Format>;
    launch_mma_kernels<Format, DenseT>(dense, column_tiles, options, stream, device);
  } else {
    launch_mma_kernels<Format, XT>(args, column_tiles, options, stream, device);
  }
}

// The K ranges' reduction: four features a thread where N % 4 == 0 and more than 16 rows, whose
// kernels store partials from 4 or more column tiles; else one a thread, which at decode rows
// spreads the few outputs over more threads.
void launch_reduce(const LinearArgs& args, cudaStream_t stream) {
  if (args.n % 4 == 0 && args.m > 16) {
    launch_dependent(linear_reduce4_kernel, grid_for(args.m * args.n / 4, 256), 256, stream, args);
  } else {
    launch_dependent(linear_reduce_kernel, grid_for(args.m * args.n, 256), 256, stream, args);
  }
}

// The kernel family for x of type XT (uint8_t: FP4 x): on the warpgroup MMA where linear_wgmma
// says so, else on mma.sync; then the K ranges' reduction.
template <class Format, typename XT>
void launch_mma(LinearArgs args, int column_tiles, const at::TensorOptions& options, cudaStream_t stream, int device) {
  if (linear_wgmma(column_tiles, device)) {
    launch_wgmma<Format, XT>(args, column_tiles, options, stream, device);
  } else {
    launch_mma_sync<Format, XT>(args, column_tiles, options, stream, device);
  }
  if (args.splits > 1) launch_reduce(args, stream);
}

// An FP4 tensor in `dtype`, its NVFP4 global scale folded in (1 where it has none).
at::Tensor dequantized(const at::Tensor& data, const at::Tensor& scales, const std::optional<at::Tensor>& global,
                       at::ScalarType dtype) {
  if (scales.scalar_type() != at::kFloat8_e4m3fn) return dequantize_mxfp4(data, scales, dtype, "linear");
  const at::Tensor g = global.has_value() ? *global : at::ones({}, data.options().dtype(at::kFloat));
  return dequantize_nvfp4(data, scales, g, dtype, "linear");
}

// Above the kernel family's rows (or K not a multiple of 128): exactly dequantize + F.linear, the
// weight (and FP4 x) dequantized to x's dtype (FP4 x: out_dtype, bf16 for fp32 output) and cuBLAS
// adding the bias, then the output dtype. Rounding each weight to 16 bits (with its global scale)
// is this path's own error, on top of SPEC 5's bound (docs/SPEC.md, "Linear").
at::Tensor linear_dequantized(const at::Tensor& x, const std::optional<at::Tensor>& x_scales,
                              const std::optional<at::Tensor>& x_global, const at::Tensor& w_data, const at::Tensor& w_scales,
                              const std::optional<at::Tensor>& w_global, const std::optional<at::Tensor>& bias,
                              at::ScalarType out_dtype) {
  const at::ScalarType dtype = x_scales.has_value() ? (out_dtype == at::kFloat ? at::kBFloat16 : out_dtype) : x.scalar_type();
  const at::Tensor a = x_scales.has_value() ? dequantized(x, *x_scales, x_global, dtype) : x;
  const at::Tensor b = dequantized(w_data, w_scales, w_global, dtype);
  const at::Tensor y = bias.has_value() ? at::linear(a, b, bias->to(dtype)) : at::linear(a, b);
  return y.to(out_dtype);
}

LinearBias bias_type(const std::optional<at::Tensor>& bias) {
  if (!bias.has_value()) return LinearBias::kNone;
  switch (bias->scalar_type()) {
    case at::kFloat: return LinearBias::kFloat;
    case at::kHalf: return LinearBias::kHalf;
    default: return LinearBias::kBFloat16;
  }
}

LinearOut out_type(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat: return LinearOut::kFloat;
    case at::kHalf: return LinearOut::kHalf;
    default: return LinearOut::kBFloat16;
  }
}

}  // namespace

at::Tensor linear(const at::Tensor& x, const std::optional<at::Tensor>& x_scales,
                  const std::optional<at::Tensor>& x_global_scale, const at::Tensor& w_data, const at::Tensor& w_scales,
                  const std::optional<at::Tensor>& w_global_scale, const std::optional<at::Tensor>& bias,
                  at::ScalarType out_dtype, bool batch_invariant) {
  check_linear(x, x_scales, x_global_scale, w_data, w_scales, w_global_scale, bias, out_dtype);
  const LaunchDevice launch_device(x.device());
  const int64_t m = x.size(0), n = w_data.size(0), k = w_data.size(1) * 2;
  constexpr int64_t kMaxRowChunks = 65535;  // gridDim.z
  const int device = x.get_device();
  const int64_t steps = k / kLinearStepElems;
  const int splits = linear_splits(n, steps);
  const int range_steps = static_cast<int>((steps + splits - 1) / splits);
  const LinearRowBounds bounds = linear_row_bounds(n, splits, range_steps, device);
  const int max_tiles = bounds.chunk_tiles;
  const bool on_kernels = k % kLinearStepElems == 0 &&
                          (m <= bounds.family_rows || (batch_invariant && m <= kMaxRowChunks * 8 * max_tiles));
  if (!on_kernels && m > 0 && n > 0) {
    return linear_dequantized(x, x_scales, x_global_scale, w_data, w_scales, w_global_scale, bias, out_dtype);
  }
  at::Tensor out = at::empty({m, n}, x.options().dtype(out_dtype));
  if (m == 0 || n == 0) return out;

  const at::Tensor xx = aligned_contiguous(x), wd = aligned_contiguous(w_data), ws = aligned_contiguous(w_scales);
  const at::Tensor xs = x_scales ? aligned_contiguous(*x_scales) : at::Tensor();
  const at::Tensor bb = bias ? bias->contiguous() : at::Tensor();
  at::Tensor partials = splits > 1 ? at::empty({splits, m, n}, x.options().dtype(at::kFloat)) : at::Tensor();

  LinearArgs args{};
  args.w_data = wd.const_data_ptr<uint8_t>();
  args.w_scales = static_cast<const uint8_t*>(ws.const_data_ptr());
  // One element each (check_linear): its pointer is the value's, whatever the shape and strides.
  args.w_global = w_global_scale ? w_global_scale->const_data_ptr<float>() : nullptr;
  args.x = xx.const_data_ptr();
  args.x_scales = x_scales ? static_cast<const uint8_t*>(xs.const_data_ptr()) : nullptr;
  args.x_global = x_global_scale ? x_global_scale->const_data_ptr<float>() : nullptr;
  args.bias = bias ? bb.const_data_ptr() : nullptr;
  args.bias_type = bias_type(bias);
  args.m = m, args.n = n, args.k = k, args.steps = steps, args.splits = splits;
  args.partials = splits > 1 ? partials.mutable_data_ptr<float>() : nullptr;
  args.out = out.mutable_data_ptr();
  args.out_type = out_type(out_dtype);
  args.prefetch_steps = linear_prefetch_steps(n, splits);
  args.range_steps = range_steps;
  const bool nvfp4 = w_scales.scalar_type() == at::kFloat8_e4m3fn;
  // Scale rows a multiple of the scale windows (ws itself is 16-byte aligned: aligned_contiguous),
  // so that every window lies within its row; the windows are 32 bytes in both formats.
  args.w_scale_windows = ws.size(1) % LinearScaleRing<Nvfp4Format>::kWindowBytes == 0;
  static_assert(LinearScaleRing<Nvfp4Format>::kWindowBytes == LinearScaleRing<Mxfp4Format>::kWindowBytes);

  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const int tiles = linear_column_tiles(m, n, splits, args.range_steps, max_tiles);
  const auto with_format = [&](auto format_tag) {
    using Format = typename decltype(format_tag)::type;
    if (x_scales.has_value()) return launch_mma<Format, uint8_t>(args, tiles, x.options(), stream, device);
    if (x.scalar_type() == at::kHalf) return launch_mma<Format, __half>(args, tiles, x.options(), stream, device);
    return launch_mma<Format, __nv_bfloat16>(args, tiles, x.options(), stream, device);
  };
  if (nvfp4) {
    with_format(TypeTag<Nvfp4Format>{});
  } else {
    with_format(TypeTag<Mxfp4Format>{});
  }
  return out;
}

}  // namespace fp4ops::cuda
