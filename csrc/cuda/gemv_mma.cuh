// Tensor-core batched FP4 GEMV (SPEC 5) for K a multiple of 128: y[l, m] = sum_k A[l,m,k] B[l,k].
//
// Why tensor cores on a bandwidth-bound op: decoding and multiplying in fp32 on the CUDA cores
// (gemv_kernels.cuh) costs more instructions per element than the memory system leaves time for.
// Here A is decoded straight into mma.sync operands (exactly, times a power of two:
// mma_fragments.cuh) and the tensor cores (fp16/bf16 m16n8k16, fp32 accumulators) do the
// multiply-adds. FP4 B is widened to fp16 like A: sm_90 has no E4M3 mma.sync in hardware.
// Geometry and B's operand layout: gemv_mma_operands.cuh.
//
// The kernel's stages (gemv_mma() at the end runs them in this order):
// 1. plan_warp: each tile is reduced by a group of warps_k warps (a function of M and K only, so
//    the summation order, and the result, depends on neither the GPU nor the batch count:
//    gemv_warps_per_tile in gemv.cu); warp kw of a group takes the tile's segments kw,
//    kw + warps_k, ... Every group streams an even, contiguous share of its batch's tiles
//    (MmaSchedule), the grid being sized to be resident at once.
// 2. ARing: each warp streams A through its own cp.async ring of kMmaStages segments, running on
//    across tile boundaries, so its loads stay in flight from its first segment to its last.
// 3. stage_b (gemv_mma_operands.cuh): the CTA's threads stage B once, in shared memory, while the
//    first A segments are on their way.
// 4. mma_segment: per segment, decode, MMA, and scale each block's partial sum in fp32 (block
//    scale times B's block scale, NaN propagating) into the lane's running sum.
// 5. TileSums::finish: at the end of a tile the lanes and the group's warps combine their sums in
//    a fixed order, so results are bitwise reproducible, and store the row.
// stream_segments is the loop over 2, 4 and 5. K % 256 == 128: the last segment's range 1
// re-reads range 0's bytes against B values of zero, so it adds exact zeros (or the NaN range 0
// already has).
// The stages' code is arranged so that the PTX, hence the SASS, is that of the single body it was
// measured as (docs/performance.md, "GEMV: tile shape and ring"): the member and variable orders
// below fix PTX's register order, which ptxas's schedule follows.
//
// Two builds of the kernel (at the end): one with ptxas's own register budget, two 16-warp CTAs
// per SM, and one for one CTA per SM, with registers enough for a second inner loop: bf16 B staged
// times 2^70 so that A's decoded bits feed the MMAs without the decoder's multiply
// (kBf16BStagingExponent). Which build runs where is the launcher's rule (gemv.cu; the
// measurements behind it: docs/performance.md, "GEMV: launch rules").
#pragma once

#include <cstdint>
#include <type_traits>

#include "async_copy.cuh"
#include "gemv_mma_operands.cuh"

namespace fp4ops::cuda {

// How a batch's 8-row tiles are shared: CTA b (of gridDim.x per batch) takes the contiguous tiles
// [b * tiles_per_cta + min(b, extra), ...), the first `extra` CTAs one tile more than the others,
// and its groups split those evenly in turn (again contiguous, the first ones one tile more). Each
// SM's load is then within one tile of the mean, and each CTA's tiles are adjacent in A. The
// launcher divides by the CTA count, so the kernel does not (a 64-bit division is long next to a
// warp's fixed cost on short rows); the 32-bit split among a CTA's groups is cheap.
struct MmaSchedule {
  int warps_k;            // warps per tile (depends on M and K only: it fixes the summation order)
  int64_t tiles_per_cta;  // tiles / gridDim.x
  int64_t extra;          // tiles % gridDim.x
  bool shift_bf16_b;      // the one-CTA build's shifted bf16-B path may run (the launcher's rule)

  // Tiles [*begin, *end) of group `group` (of `groups`) in CTA `cta`.
  __device__ __forceinline__ void group_tiles(int64_t cta, int group, int groups, int64_t* begin, int64_t* end) const {
    const int64_t cta_begin = cta * tiles_per_cta + (cta < extra ? cta : extra);
    const int cta_tiles = static_cast<int>(tiles_per_cta) + (cta < extra ? 1 : 0);
    const int per_group = cta_tiles / groups, more = cta_tiles % groups;
    *begin = cta_begin + static_cast<int64_t>(group) * per_group + (group < more ? group : more);
    *end = *begin + per_group + (group < more ? 1 : 0);
  }
};

// The ring offset after `offset`: stages of kStageBytes, wrapping after kMmaStages.
template <int kStageBytes>
__device__ __forceinline__ uint32_t next_stage_offset(uint32_t offset) {
  return offset == (kMmaStages - 1) * kStageBytes ? 0 : offset + kStageBytes;
}

// Stage 1: what one warp does, fixed at the kernel's start (the per-warp params).
struct MmaWarp {
  int lane, warp, warps;  // in the CTA
  int g, t;               // lane = 4 g + t: the MMA fragment's row group and column pair
  int warps_k, group, kw; // warps per tile, this warp's group, its turn along K
  int64_t l;              // batch
  int segments;           // per row: ceil(K / 256)
  int count;              // segments this warp takes of each tile
  int half_turn;          // the turn of the half last segment (K % 256 == 128), else -1
  int64_t tile_begin, tile_end;  // this group's tiles of batch l
  int units;              // segments this warp streams in all
};

__device__ __forceinline__ MmaWarp plan_warp(const GemvArgs& args, const MmaSchedule& schedule) {
  MmaWarp w;
  w.lane = threadIdx.x % 32, w.warp = threadIdx.x / 32, w.warps = blockDim.x / 32;
  w.warps_k = schedule.warps_k;
  w.group = w.warp / w.warps_k, w.kw = w.warp % w.warps_k;
  w.g = w.lane / 4, w.t = w.lane % 4;
  w.l = blockIdx.y;
  w.segments = static_cast<int>((args.k + kSegmentElems - 1) / kSegmentElems);
  // A group's warps read adjacent segments of each row at any moment: contiguous runs of DRAM,
  // and adjacent scale bytes.
  w.count = (w.segments - w.kw + w.warps_k - 1) / w.warps_k;
  w.half_turn = args.k % kSegmentElems != 0 && w.kw == (w.segments - 1) % w.warps_k ? w.count - 1 : -1;
  schedule.group_tiles(blockIdx.x, w.group, w.warps / w.warps_k, &w.tile_begin, &w.tile_end);
  w.units = static_cast<int>(w.tile_end - w.tile_begin) * w.count;
  return w;
}

// Stage 2: a warp's A ring. Segment i of the warp -> stage i % kMmaStages: lane (g, t) copies its
// 16 bytes of row g in each range; lanes 0..15 copy the scale bytes of one row's range each (stage
// position = lane). One commit group per segment (empty past the end, so the wait count stays
// uniform). The sources advance by one turn per segment and jump to the next tile's rows after the
// tile's last one; the destination offset cycles through the ring. Rows past M (last tile of a
// batch) read row M - 1 and are never stored.
template <class Layout>
struct ARing {
  static constexpr int kRangeBlocks = Layout::kBlocksPerRange, kSegmentBlocks = Layout::kBlocksPerSegment;
  const GemvArgs& args;
  const MmaWarp& w;
  int64_t last_row, k_bytes, k_blocks;
  int scale_row, scale_range;
  const uint8_t *next_scales, *next_codes;  // this order: see the file's header
  uint32_t ring_codes;   // this lane's codes of range 0 in stage 0; range 1 is 8 * 64 on
  uint32_t ring_scales;
  int64_t code_step, scale_step;
  uint32_t issue_offset;  // (issued % kMmaStages) * kStageBytes
  int issued, issue_turn;
  int64_t issue_tile;

  __device__ __forceinline__ ARing(const GemvArgs& a, const MmaWarp& warp, uint8_t* ring) : args(a), w(warp) {
    last_row = a.m - 1, k_bytes = a.k / 2, k_blocks = a.k / Layout::Format::kBlock;
    scale_row = w.lane % kMmaTileRows, scale_range = w.lane / kMmaTileRows % 2;
    point_at_tile(w.tile_begin);
    ring_codes = shared_address(ring) + w.g * 64 + 16 * w.t;
    ring_scales = shared_address(ring) + Layout::kStageCodeBytes + w.lane * kRangeBlocks;
    code_step = kSegmentElems / 2 * w.warps_k, scale_step = kSegmentBlocks * w.warps_k;
    issue_offset = 0, issued = 0, issue_turn = 0, issue_tile = w.tile_begin;
  }

  __device__ __forceinline__ int64_t row_address(int64_t tile, int r) const {
    const int64_t row = tile * kMmaTileRows + r;
    return w.l * args.m + (row < last_row ? row : last_row);
  }

  __device__ __forceinline__ void point_at_tile(int64_t tile) {
    next_codes = args.a_data + row_address(tile, w.g) * k_bytes + 16 * w.t + w.kw * (kSegmentElems / 2);
    next_scales = args.a_scales + row_address(tile, scale_row) * k_blocks + w.kw * kSegmentBlocks + scale_range * kRangeBlocks;
  }

  __device__ __forceinline__ void issue() {
    if (issued < w.units) {
      // In the half segment range 1 re-reads range 0 (B is zero there): never past the row.
      const bool half = issue_turn == w.half_turn;
      cp_async_16_streaming(ring_codes + issue_offset, next_codes);
      cp_async_16_streaming(ring_codes + issue_offset + 8 * 64, next_codes + (half ? 0 : kRangeElems / 2));
      if (w.lane < 2 * kMmaTileRows) {
        cp_async_small<kRangeBlocks>(ring_scales + issue_offset, next_scales - (half ? scale_range * kRangeBlocks : 0));
      }
      if (++issue_turn == w.count) {
        issue_turn = 0;
        point_at_tile(++issue_tile);
      } else {
        next_codes += code_step, next_scales += scale_step;
      }
    }
    cp_async_commit();
    issue_offset = next_stage_offset<Layout::kStageBytes>(issue_offset);
    ++issued;
  }
};

// Where lane (g, t) reads its B operand and FP4 B's block scales, segment by segment. It supplies
// B column g: range g / 4's values for lane g % 4's k-slots, i.e. its own slot when g % 4 == t and
// zeros otherwise. The zeros sit 32 bytes off the slots' 64-byte grid (no shared bank with the
// active lanes' slots in one 16-byte load).
template <class Layout>
struct BCursor {
  uint32_t first, step, scales_first, scales_step;
  uint32_t scale, operand;  // this segment's B scales and B operand (this order: the file's header)

  __device__ __forceinline__ BCursor(const MmaWarp& w, uint8_t* slots, uint32_t* b_scales, uint8_t* zero_region) {
    constexpr int kPartials = Layout::kBlocksPerSegment / 4;
    const uint32_t slots_address = shared_address(slots), zero_address = shared_address(zero_region);
    const uint32_t zeros = zero_address + ((slots_address + 32 - zero_address) & 63u);
    const bool live = w.g % 4 == w.t;
    first = live ? slots_address + (w.kw * Layout::kSlotsPerSegment + w.g / 4 * 4 + w.t) * Layout::kSlotBytes : zeros;
    step = live ? w.warps_k * Layout::kSlotsPerSegment * Layout::kSlotBytes : 0;
    scales_first = shared_address(b_scales) + (w.kw * Layout::kBlocksPerSegment + w.t * kPartials) * sizeof(uint32_t);
    scales_step = w.warps_k * Layout::kBlocksPerSegment * sizeof(uint32_t);
    operand = first, scale = scales_first;
  }
  __device__ __forceinline__ void next_segment() { operand += step, scale += scales_step; }
  __device__ __forceinline__ void rewind() { operand = first, scale = scales_first; }
};

// Where lane (g, t) reads the A scales of the blocks it keeps (mma_segment), from a stage's start.
template <class Layout>
__device__ __forceinline__ uint32_t a_scales_offset(const MmaWarp& w) {
  return Layout::kStageCodeBytes + (w.g + 8 * (w.t / 2)) * Layout::kBlocksPerRange + w.t % 2 * (Layout::kBlocksPerRange / 2);
}

// Stage 4: one segment of one warp. Decodes the lane's A words of both ranges, runs the MMAs
// against B, and adds each kept block's partial sum, scaled in fp32, to *acc. The D elements lane
// (g, t) keeps: columns 2t, 2t + 1 of row g (range 0, lanes t < 2) or of row g + 8 (range 1, lanes
// t >= 2): the segment's blocks [4t, 4t + 4) (NVFP4) or [2t, 2t + 2) (MXFP4).
// kRawA: B staged times 2^70 and A decoded to its raw bits (kBf16BStagingExponent), so the
// operands carry 2^(70 - 126) instead of Layout's power of two.
template <class Layout, bool kRawA>
__device__ __forceinline__ void mma_segment(uint32_t codes, uint32_t stage_scales, uint32_t b_operand, uint32_t b_scale,
                                            bool upper, float* acc) {
  using MmaT = typename Layout::MmaT;
  constexpr int kPartials = Layout::kBlocksPerSegment / 4;
  constexpr int kDecodeExponent = kRawA ? kBf16BitsDecodeExponent + kBf16BStagingExponent : Layout::kDecodeExponent;
  const auto decode = [](uint32_t w) {
    if constexpr (kRawA) {
      return e2m1x8_to_bf16_bits(w);
    } else {
      return DenseOperand<MmaT>::decode(w);
    }
  };
  const uint4 range0 = lds_128(codes), range1 = lds_128(codes + 8 * 64);
  const uint32_t words0[4] = {range0.x, range0.y, range0.z, range0.w};
  const uint32_t words1[4] = {range1.x, range1.y, range1.z, range1.w};
  // NVFP4: d[0] sums each lane's first block (words 0-1), d[1] its second (words 2-3). MXFP4's one
  // block per lane alternates between d[0] (words 0, 2) and d[1] (words 1, 3), so that its 8 MMAs
  // form two dependent chains instead of one.
  float d[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint4 bw = lds_128(b_operand + j * 16);
    const Regs4 x = decode(words0[j]), y = decode(words1[j]);
    float(&dj)[4] = d[Layout::kNvfp4 ? j / 2 : j % 2];
    mma_m16n8k16<MmaT>(dj, {x.reg[0], y.reg[0], x.reg[1], y.reg[1]}, bw.x, bw.y);
    mma_m16n8k16<MmaT>(dj, {x.reg[2], y.reg[2], x.reg[3], y.reg[3]}, bw.z, bw.w);
  }
  // dk[i] = the partial sum of block kPartials * t + i; sa_codes its scale code.
  const auto kept = [&](int fragment, int column) { return upper ? d[fragment][2 + column] : d[fragment][column]; };
  // sa, sa_codes and sb are each read by some of the layouts only.
  float dk[kPartials];
  [[maybe_unused]] float sa[kPartials];
  [[maybe_unused]] uint32_t sa_codes[kPartials];
  if constexpr (Layout::kNvfp4) {
    dk[0] = kept(0, 0), dk[1] = kept(1, 0), dk[2] = kept(0, 1), dk[3] = kept(1, 1);
    const uint32_t scales = lds_u32(stage_scales);
    const float2 s01 = e4m3x2_to_float2(scales & 0xFFFFu), s23 = e4m3x2_to_float2(scales >> 16);
    sa[0] = s01.x, sa[1] = s01.y, sa[2] = s23.x, sa[3] = s23.y;
  } else {
    dk[0] = __fadd_rn(kept(0, 0), kept(1, 0)), dk[1] = __fadd_rn(kept(0, 1), kept(1, 1));
    const uint32_t scales = lds_u16(stage_scales);
    sa_codes[0] = scales & 0xFFu, sa_codes[1] = scales >> 8;
    if constexpr (!Layout::kFp4B) sa[0] = e8m0_decode(sa_codes[0]), sa[1] = e8m0_decode(sa_codes[1]);
  }
  // B's block scales for FP4 B: fp32 bits times 2^-kDecodeExponent, or E8M0 codes.
  [[maybe_unused]] uint32_t sb[kPartials];
  if constexpr (Layout::kFp4B && Layout::kNvfp4) {
    const uint4 v = lds_128(b_scale);
    sb[0] = v.x, sb[1] = v.y, sb[2] = v.z, sb[3] = v.w;
  } else if constexpr (Layout::kFp4B) {
    sb[0] = lds_u32(b_scale), sb[1] = lds_u32(b_scale + sizeof(uint32_t));
  }
  // Undo the operands' power of two (exact: D and the NVFP4 scales are far from the fp32 limits).
  const auto undo = [](float v) { return kDecodeExponent == 0 ? v : mul_rn(v, exp2_int(-kDecodeExponent)); };
#pragma unroll
  for (int i = 0; i < kPartials; ++i) {
    float partial;
    if constexpr (Layout::kFp4B && Layout::kNvfp4) {
      partial = mul_rn(mul_rn(dk[i], sa[i]), bits_to_float(sb[i]));
    } else if constexpr (Layout::kFp4B) {
      partial = scale_by_e8m0_pair(dk[i], sa_codes[i], sb[i], -kDecodeExponent);
    } else if constexpr (Layout::kNvfp4) {
      partial = mul_rn(dk[i], undo(sa[i]));  // sa * 2^-kDecodeExponent <= 448 * 2^56
    } else {
      partial = mul_rn(undo(dk[i]), sa[i]);
    }
    *acc = __fadd_rn(*acc, partial);
  }
}

// Stage 5: the end of a tile. The lanes t of a quad hold row g's sums over different blocks: a
// fixed butterfly, then one partial per warp and row, summed over the group's warps in order (the
// partials alternate between two buffers by tile parity, so one barrier per tile suffices: a
// buffer is rewritten only after the next tile's barrier, which its reader has passed). The
// global scales are read once (a missing one is 1: multiplying by it is exact).
template <typename OutT>
struct TileSums {
  const GemvArgs& args;
  const MmaWarp& w;
  OutT* out;
  float* row_partials;
  float a_global, b_global;

  __device__ __forceinline__ TileSums(const GemvArgs& a, const MmaWarp& warp, OutT* o, float* partials)
      : args(a), w(warp), out(o), row_partials(partials),
        a_global(a.a_global != nullptr ? *a.a_global : 1.0f), b_global(a.b_global != nullptr ? *a.b_global : 1.0f) {}

  __device__ __forceinline__ void store_row(int64_t row, float y) const {
    if (row >= args.m) return;
    out[w.l * args.m + row] = from_float<OutT>(mul_rn(mul_rn(y, a_global), b_global));
  }

  // Stores the tile's rows from every lane's running sum *acc, and resets it.
  __device__ __forceinline__ void finish(int64_t tile, int parity, float* acc) const {
#pragma unroll
    for (int offset = 1; offset < 4; offset *= 2) *acc = __fadd_rn(*acc, __shfl_xor_sync(0xFFFFFFFFu, *acc, offset));
    const int64_t row0 = tile * kMmaTileRows;
    if (w.warps_k == 1) {
      if (w.t == 0) store_row(row0 + w.g, *acc);
    } else {
      float* mine = row_partials + (w.warp * 2 + parity) * kMmaTileRows;
      if (w.t == 0) mine[w.g] = *acc;
      group_barrier(1 + w.group, w.warps_k * 32);
      if (w.kw == 0 && w.lane < kMmaTileRows) {
        float y = mine[w.lane];
        for (int k = 1; k < w.warps_k; ++k) y = __fadd_rn(y, mine[k * 2 * kMmaTileRows + w.lane]);
        store_row(row0 + w.lane, y);
      }
    }
    *acc = 0.0f;
  }
};

// The warp's main loop (stages 2, 4 and 5): wait for segment i, issue segment i + kMmaStages - 1
// into the stage just freed, compute segment i, and finish the tile after its last segment. The
// lane's A scales of a stage are scale_offset bytes from its start (ring_base: stage 0).
template <class Layout, bool kRawA, typename OutT>
__device__ __forceinline__ void stream_segments(const MmaWarp& w, ARing<Layout>& a_ring, BCursor<Layout>& b,
                                                uint32_t ring_base, uint32_t scale_offset, bool upper,
                                                const TileSums<OutT>& sums) {
  float acc = 0.0f;
  int parity = 0, turn = 0;  // this order: see the file's header
  int64_t tile = w.tile_begin;
  uint32_t stage_offset = 0;
  for (int i = 0; i < w.units; ++i) {
    cp_async_wait<kMmaStages - 2>();  // this lane's copies of segment i have landed ...
    __syncwarp();                      // ... and every lane's (scale rows); stage (i - 1) is free
    a_ring.issue();                    // segment i + kMmaStages - 1
    mma_segment<Layout, kRawA>(a_ring.ring_codes + stage_offset, ring_base + stage_offset + scale_offset, b.operand, b.scale, upper,
                               &acc);
    stage_offset = next_stage_offset<Layout::kStageBytes>(stage_offset);
    b.next_segment();
    if (++turn == w.count) {
      sums.finish(tile++, parity, &acc);
      turn = 0, parity ^= 1;
      b.rewind();
    }
  }
}

// The kernel's body, built twice (the two kernels at the end of this file).
template <class Format, typename BT, typename OutT, bool kOneCtaPerSm>
__device__ __forceinline__ void gemv_mma(const GemvArgs& args, OutT* __restrict__ out, const MmaSchedule& schedule) {
  using Layout = MmaGemvLayout<Format, BT>;
  extern __shared__ __align__(16) uint8_t smem[];

  // 1. Who does what.
  const MmaWarp w = plan_warp(args, schedule);

  // Shared memory, in MmaGemvLayout's order.
  uint8_t* ring = smem + static_cast<size_t>(w.warp) * kMmaStages * Layout::kStageBytes;
  uint8_t* slots = smem + Layout::ring_bytes(w.warps);
  uint32_t* b_scales = reinterpret_cast<uint32_t*>(slots + Layout::slots_bytes(w.segments));
  uint8_t* zero_region = slots + Layout::slots_bytes(w.segments) + Layout::scales_bytes(w.segments);
  float* row_partials = reinterpret_cast<float*>(zero_region + Layout::kZeroRunBytes);  // [warp][2][8]

  // 2. The first segments of A on their way.
  ARing<Layout> a_ring(args, w, ring);
  // Through a lambda, as the body always did: a direct call gives the same operations in another
  // PTX register order (see the file's header).
  const auto issue = [&]() { a_ring.issue(); };
#pragma unroll
  for (int i = 0; i < kMmaStages - 1; ++i) issue();

  // 3. B's operands, staged by all the CTA's threads meanwhile. bf16 B is staged shifted for the
  // raw-bits decode of A when the whole batch allows it (every CTA of a batch decides the same),
  // and staged again unshifted otherwise. Only in the build for one CTA per SM, which has the
  // registers for both loops; the launcher allows the shifted path per GPU
  // (schedule.shift_bf16_b; docs/performance.md, "GEMV: shifted bf16 B staging").
  constexpr bool kMayShiftB = kOneCtaPerSm && std::is_same_v<BT, __nv_bfloat16>;
  bool shifted_b = false;
  if constexpr (kMayShiftB) {
    if (schedule.shift_bf16_b) {
      shifted_b = !__syncthreads_or(!stage_b<Format, BT, true>(args, w.l, w.segments, slots, b_scales));
    }
  }
  if (!shifted_b) stage_b<Format, BT>(args, w.l, w.segments, slots, b_scales);
  if (threadIdx.x < Layout::kZeroRunBytes / 16) reinterpret_cast<uint4*>(zero_region)[threadIdx.x] = make_uint4(0u, 0u, 0u, 0u);
  __syncthreads();

  // 4 and 5. The segments, through mma_segment, and the tiles' sums, through TileSums.
  BCursor<Layout> b(w, slots, b_scales, zero_region);
  const bool upper = w.t >= 2;  // the lane keeps D's rows g + 8 (range 1): see mma_segment
  const uint32_t scale_offset = a_scales_offset<Layout>(w);
  const uint32_t ring_base = shared_address(ring);
  const TileSums<OutT> sums(args, w, out, row_partials);
  if (shifted_b) {
    if constexpr (kMayShiftB) stream_segments<Layout, true>(w, a_ring, b, ring_base, scale_offset, upper, sums);
  } else {
    stream_segments<Layout, false>(w, a_ring, b, ring_base, scale_offset, upper, sums);
  }
}

// The two builds of the kernel, alike but for the register budget ptxas gets (and the shifted bf16
// B path, which needs the registers). gemv_mma_kernel: ptxas's own choice, so that two 16-warp CTAs
// fit on an SM. gemv_mma_kernel_one_cta_per_sm: up to 128 registers, one such CTA per SM. Which is
// faster depends on the GPU and the work (gemv.cu, the launcher).
template <class Format, typename BT, typename OutT>
__global__ void __launch_bounds__(kMmaMaxWarpsPerCta * 32)
    gemv_mma_kernel(GemvArgs args, OutT* __restrict__ out, MmaSchedule schedule) {
  gemv_mma<Format, BT, OutT, false>(args, out, schedule);
}

template <class Format, typename BT, typename OutT>
__global__ void __launch_bounds__(kMmaMaxWarpsPerCta * 32, 1)
    gemv_mma_kernel_one_cta_per_sm(GemvArgs args, OutT* __restrict__ out, MmaSchedule schedule) {
  gemv_mma<Format, BT, OutT, true>(args, out, schedule);
}

}  // namespace fp4ops::cuda
