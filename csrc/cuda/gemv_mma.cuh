// Tensor-core batched FP4 GEMV (SPEC 5) for K a multiple of 128: y[l, m] = sum_k A[l,m,k] B[l,k].
//
// Why tensor cores on a bandwidth-bound op: decoding and multiplying in fp32 on the CUDA cores
// (gemv_kernels.cuh) costs more instructions per element than the memory system leaves time for.
// Here A is decoded straight into mma.sync operands (exactly, times a power of two:
// mma_fragments.cuh) and the tensor cores (fp16/bf16 m16n8k16, fp32 accumulators) do the
// multiply-adds. FP4 B is widened to fp16 like A: sm_90 has no E4M3 mma.sync in hardware.
// Geometry and B's operand layout: gemv_mma_operands.cuh.
//
// The kernel's stages, in gemv_mma() below:
// 1. Who does what: each tile is reduced by a group of warps_k warps (a function of M and K only,
//    so the summation order, and the result, depends on neither the GPU nor the batch count:
//    gemv_warps_per_tile in gemv.cu); warp kw of a group takes the tile's segments kw,
//    kw + warps_k, ... Every group streams an even, contiguous share of its batch's tiles
//    (MmaSchedule), the grid being sized to be resident at once.
// 2. issue(): each warp streams A through its own cp.async ring of kMmaStages segments, running on
//    across tile boundaries, so its loads stay in flight from its first segment to its last.
// 3. stage_b(): the CTA's threads stage B once, in shared memory, while the first A segments are
//    on their way.
// 4. process_segment(): per segment, decode, MMA, and scale each block's partial sum in fp32
//    (block scale times B's block scale, NaN propagating) into the lane's running sum.
// 5. finish_tile(): at the end of a tile the lanes and the group's warps combine their sums in a
//    fixed order, so results are bitwise reproducible, and store the row.
// K % 256 == 128: the last segment's range 1 re-reads range 0's bytes against B values of zero,
// so it adds exact zeros (or the NaN range 0 already has).
// The stages stay lambdas over the body's locals rather than functions over a params struct:
// that rewrite changes ptxas's schedule of the FP4 x FP4 kernels, measurably for the worse
// (docs/performance.md, "GEMV: tile shape and ring").
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

// The kernel's body, built twice (the two kernels at the end of this file).
template <class Format, typename BT, typename OutT, bool kOneCtaPerSm>
__device__ __forceinline__ void gemv_mma(const GemvArgs& args, OutT* __restrict__ out, const MmaSchedule& schedule) {
  using Layout = MmaGemvLayout<Format, BT>;
  constexpr int kRangeBlocks = Layout::kBlocksPerRange, kSegmentBlocks = Layout::kBlocksPerSegment;
  extern __shared__ __align__(16) uint8_t smem[];

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const int warps_k = schedule.warps_k;
  const int group = warp / warps_k, kw = warp % warps_k;  // this warp's group and turn along K
  const int g = lane / 4, t = lane % 4;
  const int64_t l = blockIdx.y;
  const int segments = static_cast<int>((args.k + kSegmentElems - 1) / kSegmentElems);
  // Warp kw takes segments kw, kw + warps_k, ... of each tile: at any moment a group's warps read
  // adjacent segments of each row, i.e. contiguous runs of DRAM, and adjacent scale bytes.
  const int count = (segments - kw + warps_k - 1) / warps_k;
  // K % 256 == 128: the turn at which this warp reads the last segment, whose range 1 is past K.
  const int half_turn = args.k % kSegmentElems != 0 && kw == (segments - 1) % warps_k ? count - 1 : -1;

  // This group's tiles of batch l: an even, contiguous share (MmaSchedule).
  int64_t tile_begin, tile_end;
  schedule.group_tiles(blockIdx.x, group, warps / warps_k, &tile_begin, &tile_end);
  const int units = static_cast<int>(tile_end - tile_begin) * count;  // this warp's segments in all

  uint8_t* ring = smem + static_cast<size_t>(warp) * kMmaStages * Layout::kStageBytes;
  uint8_t* slots = smem + Layout::ring_bytes(warps);
  uint32_t* b_scales = reinterpret_cast<uint32_t*>(slots + Layout::slots_bytes(segments));
  uint8_t* zero_region = slots + Layout::slots_bytes(segments) + Layout::scales_bytes(segments);
  float* row_partials = reinterpret_cast<float*>(zero_region + Layout::kZeroRunBytes);  // [warp][2][8]

  // Rows past M (last tile of a batch) read row M - 1 and are never stored.
  const int64_t last_row = args.m - 1, k_bytes = args.k / 2, k_blocks = args.k / Format::kBlock;
  const auto row_address = [&](int64_t tile, int r) {
    const int64_t row = tile * kMmaTileRows + r;
    return l * args.m + (row < last_row ? row : last_row);
  };

  // Segment i of this warp -> stage i % kMmaStages: lane (g, t) copies its 16 bytes of row g in
  // each range; lanes 0..15 copy the scale bytes of one row's range each (stage position = lane).
  // One commit group per segment (empty past the end, so the wait count below stays uniform). The
  // sources advance by one turn per segment and jump to the next tile's rows after the tile's last
  // one; the destination offset cycles through the ring.
  const int scale_row = lane % kMmaTileRows, scale_range = lane / kMmaTileRows % 2;
  const uint8_t *next_codes, *next_scales;
  const auto point_at_tile = [&](int64_t tile) {
    next_codes = args.a_data + row_address(tile, g) * k_bytes + 16 * t + kw * (kSegmentElems / 2);
    next_scales = args.a_scales + row_address(tile, scale_row) * k_blocks + kw * kSegmentBlocks + scale_range * kRangeBlocks;
  };
  point_at_tile(tile_begin);
  const uint32_t ring_codes = shared_address(ring) + g * 64 + 16 * t;  // range 0; range 1 is 8 * 64 on
  const uint32_t ring_scales = shared_address(ring) + Layout::kStageCodeBytes + lane * kRangeBlocks;
  const int64_t code_step = kSegmentElems / 2 * warps_k, scale_step = kSegmentBlocks * warps_k;
  uint32_t issue_offset = 0;  // (issued % kMmaStages) * kStageBytes
  int issued = 0, issue_turn = 0;
  int64_t issue_tile = tile_begin;
  const auto issue = [&]() {
    if (issued < units) {
      // In the half segment range 1 re-reads range 0 (B is zero there): never past the row.
      const bool half = issue_turn == half_turn;
      cp_async_16_streaming(ring_codes + issue_offset, next_codes);
      cp_async_16_streaming(ring_codes + issue_offset + 8 * 64, next_codes + (half ? 0 : kRangeElems / 2));
      if (lane < 2 * kMmaTileRows) {
        cp_async_small<kRangeBlocks>(ring_scales + issue_offset, next_scales - (half ? scale_range * kRangeBlocks : 0));
      }
      if (++issue_turn == count) {
        issue_turn = 0;
        point_at_tile(++issue_tile);
      } else {
        next_codes += code_step, next_scales += scale_step;
      }
    }
    cp_async_commit();
    issue_offset = next_stage_offset<Layout::kStageBytes>(issue_offset);
    ++issued;
  };
#pragma unroll
  for (int i = 0; i < kMmaStages - 1; ++i) issue();

  // B's operands are staged by all the CTA's threads while the first A segments are on their way.
  // bf16 B is staged shifted for the raw-bits decode of A when the whole batch allows it (every
  // CTA of a batch decides the same), and staged again unshifted otherwise. Only in the build for
  // one CTA per SM, which has the registers for both loops; the launcher allows the shifted path
  // per GPU (schedule.shift_bf16_b; docs/performance.md, "GEMV: shifted bf16 B staging").
  constexpr bool kMayShiftB = kOneCtaPerSm && std::is_same_v<BT, __nv_bfloat16>;
  bool shifted_b = false;
  if constexpr (kMayShiftB) {
    if (schedule.shift_bf16_b) {
      shifted_b = !__syncthreads_or(!stage_b<Format, BT, true>(args, l, segments, slots, b_scales));
    }
  }
  if (!shifted_b) stage_b<Format, BT>(args, l, segments, slots, b_scales);
  if (threadIdx.x < Layout::kZeroRunBytes / 16) reinterpret_cast<uint4*>(zero_region)[threadIdx.x] = make_uint4(0u, 0u, 0u, 0u);
  __syncthreads();

  // Lane (g, t) supplies B column g: range g / 4's values for lane g % 4's k-slots, i.e. its own
  // slot when g % 4 == t and zeros otherwise. The zeros sit 32 bytes off the slots' 64-byte grid.
  const uint32_t slots_address = shared_address(slots), zero_address = shared_address(zero_region);
  const uint32_t zeros = zero_address + ((slots_address + 32 - zero_address) & 63u);
  const bool live = g % 4 == t;
  const uint32_t b_first = live ? slots_address + (kw * Layout::kSlotsPerSegment + g / 4 * 4 + t) * Layout::kSlotBytes : zeros;
  const uint32_t b_step = live ? warps_k * Layout::kSlotsPerSegment * Layout::kSlotBytes : 0;
  // The D elements lane (g, t) keeps: columns 2t, 2t + 1 of row g (range 0, lanes t < 2) or of row
  // g + 8 (range 1, lanes t >= 2): the segment's blocks [4t, 4t + 4) (NVFP4) or [2t, 2t + 2).
  constexpr int kPartials = kSegmentBlocks / 4;
  const bool upper = t >= 2;
  const uint32_t scale_offset = Layout::kStageCodeBytes + (g + 8 * (t / 2)) * kRangeBlocks + t % 2 * (kRangeBlocks / 2);
  const uint32_t b_scales_first = shared_address(b_scales) + (kw * kSegmentBlocks + t * kPartials) * sizeof(uint32_t);
  const uint32_t b_scales_step = warps_k * kSegmentBlocks * sizeof(uint32_t);
  uint32_t b_operand = b_first, b_scale = b_scales_first;

  float acc = 0.0f;
  const uint32_t ring_base = shared_address(ring);
  // shifted (std::bool_constant): B staged times 2^70 and A decoded to its raw bits (see
  // kBf16BStagingExponent), so the operands carry 2^(70 - 126) instead of Layout's power of two.
  const auto process_segment = [&](uint32_t stage_offset, auto shifted) {
    using MmaT = typename Layout::MmaT;
    constexpr bool kRawA = decltype(shifted)::value;
    constexpr int kDecodeExponent = kRawA ? kBf16BitsDecodeExponent + kBf16BStagingExponent : Layout::kDecodeExponent;
    const auto decode = [](uint32_t w) {
      if constexpr (kRawA) {
        return e2m1x8_to_bf16_bits(w);
      } else {
        return DenseOperand<MmaT>::decode(w);
      }
    };
    const uint32_t codes = ring_codes + stage_offset;
    const uint4 range0 = lds_128(codes), range1 = lds_128(codes + 8 * 64);
    const uint32_t words0[4] = {range0.x, range0.y, range0.z, range0.w};
    const uint32_t words1[4] = {range1.x, range1.y, range1.z, range1.w};
    // NVFP4: d[0] sums each lane's first block (words 0-1), d[1] its second (words 2-3). MXFP4's
    // one block per lane alternates between d[0] (words 0, 2) and d[1] (words 1, 3), so that its 8
    // MMAs form two dependent chains instead of one (docs/performance.md, "GEMV: tile shape and
    // ring").
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
    const uint32_t stage_scales = ring_base + stage_offset + scale_offset;
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
      acc = __fadd_rn(acc, partial);
    }
  };

  // The global scales, read once (a missing one is 1: multiplying by it is exact).
  const float a_global = args.a_global != nullptr ? *args.a_global : 1.0f;
  const float b_global = args.b_global != nullptr ? *args.b_global : 1.0f;
  const auto store_row = [&](int64_t row, float y) {
    if (row >= args.m) return;
    out[l * args.m + row] = from_float<OutT>(mul_rn(mul_rn(y, a_global), b_global));
  };
  // End of a tile: the lanes t of a quad hold row g's sums over different blocks: a fixed
  // butterfly, then one partial per warp and row, summed over the group's warps in order (the
  // partials alternate between two buffers by tile parity, so one barrier per tile suffices:
  // a buffer is rewritten only after the next tile's barrier, which its reader has passed).
  const auto finish_tile = [&](int64_t tile, int parity) {
#pragma unroll
    for (int offset = 1; offset < 4; offset *= 2) acc = __fadd_rn(acc, __shfl_xor_sync(0xFFFFFFFFu, acc, offset));
    const int64_t row0 = tile * kMmaTileRows;
    if (warps_k == 1) {
      if (t == 0) store_row(row0 + g, acc);
    } else {
      float* mine = row_partials + (warp * 2 + parity) * kMmaTileRows;
      if (t == 0) mine[g] = acc;
      group_barrier(1 + group, warps_k * 32);
      if (kw == 0 && lane < kMmaTileRows) {
        float y = mine[lane];
        for (int w = 1; w < warps_k; ++w) y = __fadd_rn(y, mine[w * 2 * kMmaTileRows + lane]);
        store_row(row0 + lane, y);
      }
    }
    acc = 0.0f;
  };

  const auto stream_segments = [&](auto shifted) {
    int turn = 0, parity = 0;
    int64_t tile = tile_begin;
    uint32_t stage_offset = 0;
    for (int i = 0; i < units; ++i) {
      cp_async_wait<kMmaStages - 2>();  // this lane's copies of segment i have landed ...
      __syncwarp();                      // ... and every lane's (scale rows); stage (i - 1) is free
      issue();  // segment i + kMmaStages - 1
      process_segment(stage_offset, shifted);
      stage_offset = next_stage_offset<Layout::kStageBytes>(stage_offset);
      b_operand += b_step, b_scale += b_scales_step;
      if (++turn == count) {
        finish_tile(tile++, parity);
        turn = 0, parity ^= 1;
        b_operand = b_first, b_scale = b_scales_first;
      }
    }
  };
  if (shifted_b) {
    if constexpr (kMayShiftB) stream_segments(std::true_type{});
  } else {
    stream_segments(std::false_type{});
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
