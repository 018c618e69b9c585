// The linear kernels on Hopper's warpgroup MMA (wgmma, sm_90a): the calls whose CTAs take 32, 64 or
// 128 rows of x (linear.cu, linear_wgmma), dense x (fp16/bf16, or FP4 x decoded once per call into it).
//
// Each warp decodes its 16 weight rows into exactly the A fragments of linear_mma.cuh's prescaled
// path (same ring, same decode, same prescaling) and hands them to the warpgroup's MMAs, which read the
// step's x from shared memory for all of the CTA's rows at once. wgmma adds a column's products as
// mma.sync does (wgmma.cuh), and every row of x goes through the same operations in the same
// order, so these kernels give linear_mma_kernel's bits: a call may take either, by row count,
// without costing batch invariance. MXFP4 blocks outside the prescaling window add zero products
// here as there, and their sums after the main loop (linear_mxfp4_outside_pass).
//
// x reaches these kernels as an "x image" (linear_wgmma_x_image_kernel,
// linear_decode_x_image_kernel): per row chunk of the CTA's rows, step after step, each
// step exactly the bytes the CTA holds in shared memory for it. So one bulk copy stages a step
// (or, resident, the CTA's whole K range), and wgmma reads it through the same async proxy that
// wrote it: no proxy fence, no per-thread x copies.
#pragma once

#include <cstdint>

#include "linear_mma.cuh"
#include "wgmma.cuh"

namespace fp4ops::cuda {

// Byte offset of 16-byte chunk c (0..15) of row `token` within one step of x for a CTA of `tokens`
// rows: two 128-byte-swizzle atoms of 64 elements of K (wgmma_swizzled_descriptor), each `tokens`
// rows of 128 bytes, chunk c % 8 of a row at c % 8 XOR the row's low 3 bits.
__host__ __device__ constexpr uint32_t wgmma_x_chunk_offset(int tokens, int token, int c) {
  return static_cast<uint32_t>(c >> 3) * tokens * 128 + static_cast<uint32_t>(token) * 128 +
         static_cast<uint32_t>((c & 7) ^ (token & 7)) * 16;
}

// The x image: rows in chunks of `tokens` (a CTA's column tiles; rows past M zero up to a whole
// chunk), each chunk step after step, each step `tokens` x 256 bytes laid out as in shared memory.
struct WgmmaXImage {
  uint8_t* out;
  int64_t m, steps;  // rows of x; K / kLinearStepElems
  int tokens;
  __device__ __forceinline__ int64_t rows() const { return (m + tokens - 1) / tokens * tokens; }
  // Byte offset of chunk c (0..15) of step `step` of row `row`.
  __device__ __forceinline__ int64_t offset(int64_t row, int64_t step, int c) const {
    return ((row / tokens) * steps + step) * (tokens * 256) + wgmma_x_chunk_offset(tokens, static_cast<int>(row % tokens), c);
  }
};

// The chunk order within one unit of 32 elements of x: from its four chunks of 8 in the decoders'
// pairing, chunk c (k group c) holds word c of each. So k group c of a row is a row of the core
// matrix whose k slots 2t, 2t + 1 are word c of chunk t: the B register that lane t's mma.sync would
// take for register half c (dense_b), as linear_wgmma_step's k slices expect.
__device__ __forceinline__ uint4 wgmma_k_group(const uint4 (&paired)[4], int c) {
  const auto word = [c](const uint4& v) { return c == 0 ? v.x : c == 1 ? v.y : c == 2 ? v.z : v.w; };
  return make_uint4(word(paired[0]), word(paired[1]), word(paired[2]), word(paired[3]));
}

// Dense x [M, K] into the x image, one unit of 32 elements a thread. Runs as a programmatic
// dependent, like linear_permute_x_kernel.
template <typename XT>
__global__ void __launch_bounds__(256) linear_wgmma_x_image_kernel(const uint4* __restrict__ x, WgmmaXImage image) {
  linear_dependent_start();
  const int64_t row_units = image.steps * 4;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < image.rows() * row_units;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / row_units, unit = i % row_units;
    uint4 paired[4] = {};
    if (row < image.m) {
#pragma unroll
      for (int q = 0; q < 4; ++q) paired[q] = paired_x_chunk<XT>(x[4 * i + q]);
    }
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      *reinterpret_cast<uint4*>(image.out + image.offset(row, unit / 4, 4 * (unit % 4) + c)) = wgmma_k_group(paired, c);
    }
  }
}

// FP4 x (W4A4) decoded once per call (Chunk: PrescaledNvfp4XChunk, ExactMxfp4XChunk) into the x
// image, one chunk of 8 elements a thread: its four registers go to word (chunk % 4) of the unit's
// four k groups.
template <class Chunk>
__global__ void __launch_bounds__(256) linear_decode_x_image_kernel(const uint32_t* __restrict__ codes,
                                                                   const uint8_t* __restrict__ scales, WgmmaXImage image) {
  linear_dependent_start();
  const int64_t row_chunks = image.steps * 16;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < image.rows() * row_chunks;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / row_chunks;
    const int q = static_cast<int>(i % 16);  // chunk within its step
    const Regs4 v = row < image.m ? Chunk::decode(codes, scales, i) : Regs4{};
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      reinterpret_cast<uint32_t*>(image.out + image.offset(row, i % row_chunks / 16, 4 * (q / 4) + c))[q % 4] = v.reg[c];
    }
  }
}

// Shared memory of a wgmma kernel: kLinearStages ring stages, each [W codes: warp][16 rows][64
// bytes] as in LinearLayout, then (x staged per step) the step's x at a 1024-byte boundary (swizzle
// atoms); stages a multiple of 1024 bytes. Then each warp's scale ring (LinearScaleRing, 1 KB),
// resident x (the CTA's whole K range, step after step), and the mbarriers of the x copies, one per
// stage (or one for resident x).
template <class FormatT, typename XT, int kNt, bool kResident>
struct LinearWgmmaLayout {
  static_assert((kNt == 4 || kNt == 8 || kNt == 16) && (!kResident || kNt == 4),
                "32 rows (resident or not), 64 or 128 (staged per step)");
  using Format = FormatT;
  using XType = XT;
  using MmaT = XT;
  static constexpr bool kNvfp4 = std::is_same_v<Format, Nvfp4Format>;
  static constexpr int kWCarriedExponent = kNvfp4 ? LinearScaling<MmaT>::kExponent : Mxfp4Prescaling<MmaT>::kCarriedExponent;
  static constexpr bool kXResident = kResident;
  static constexpr int kTokens = 8 * kNt;
  static constexpr int kWCodeBytes = kLinearTileRows * kLinearStepElems / 2;
  using ScaleRing = LinearScaleRing<Format>;
  static_assert(ScaleRing::kWarpBytes % 1024 == 0, "resident x after the scale rings stays at a 1024-byte boundary");
  static constexpr uint32_t kXStepBytes = kTokens * kLinearStepElems * 2;
  static constexpr int kBarriers = kResident ? 1 : kLinearStages;
  static constexpr uint32_t align(uint32_t bytes) { return (bytes + 1023) / 1024 * 1024; }
  static constexpr uint32_t x_offset(int warps) { return align(static_cast<uint32_t>(warps) * kWCodeBytes); }
  static constexpr uint32_t stage_bytes(int warps) { return x_offset(warps) + (kResident ? 0 : kXStepBytes); }
  static constexpr uint32_t ring_bytes(int warps) { return kLinearStages * stage_bytes(warps); }
  static constexpr uint32_t scale_ring_offset(int warps) { return ring_bytes(warps); }
  static constexpr uint32_t resident_x_offset(int warps) { return scale_ring_offset(warps) + warps * ScaleRing::kWarpBytes; }
  static constexpr uint32_t resident_x_bytes(int range_steps) { return kResident ? range_steps * kXStepBytes : 0; }
  static constexpr uint32_t barriers_offset(int warps, int range_steps) { return resident_x_offset(warps) + resident_x_bytes(range_steps); }
  static constexpr size_t smem_bytes(int warps, int range_steps) { return barriers_offset(warps, range_steps) + 8 * kBarriers; }
};

// One step of one warp: the weight fragments of linear_compute_step's prescaled path, handed with the
// step's x (`x_step`, shared address) to the warpgroup's MMAs, two per unit (register halves 0-1
// and 2-3, as there), each for every column tile at once. Unit u's half hm has its k slots in x's k
// groups 4u + 2hm (k 0-7) and 4u + 2hm + 1 (k 8-15): one k16 slice of atom u / 2.
// The MMAs read the fragments and x asynchronously, one commit group per unit, so a unit's MMAs run
// while the warp decodes the next units and steps. Unit u's fragments are written again one step
// later, after the wait that leaves at most the three groups committed since in flight, so unit u
// of the step before is done (groups complete in order). PTX leaves it to the program not to write
// the registers of an MMA in flight; the words pass through an empty asm after the wait, so that the
// compiler cannot move the decode above it. By the end of a step, every group of the step before is
// done, which frees that step's x for the next copy (linear_wgmma_cta's kAhead). Returns whether
// the step had a block outside MXFP4's prescaling window (mxfp4_lane_factors: that block's fragments
// are zeros).
template <class Layout>
__device__ __forceinline__ bool linear_wgmma_step(uint32_t stage, uint32_t scales_g, uint32_t x_step, const LinearLaneOffsets& lane,
                                                  LinearAccumulators<Layout>& acc, uint32_t (&a)[4][2][4]) {
  bool outside = false;
#if defined(FP4OPS_HW_WGMMA)
  using Scaling = LinearScaling<typename Layout::MmaT>;
  constexpr int kNt = Layout::kTokens / 8;
  const uint4 units01 = ldmatrix_x4(stage + lane.ldm0), units23 = ldmatrix_x4(stage + lane.ldm1);
  uint32_t words[4][2] = {{units01.x, units01.y}, {units01.z, units01.w}, {units23.x, units23.y}, {units23.z, units23.w}};
  uint32_t factors[4][2];
  outside = prescaled_lane_factors<Layout>(scales_g, lane, factors);
  const uint64_t x_descriptor = wgmma_swizzled_descriptor(x_step, 1024);
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    wgmma_wait<3>();
    asm volatile("" : "+r"(words[u][0]), "+r"(words[u][1]));
    Regs4 a0 = Scaling::decode(words[u][0]), a1 = Scaling::decode(words[u][1]);
#pragma unroll
    for (int r = 0; r < 4; ++r) a0.reg[r] = Scaling::mul(a0.reg[r], factors[u][0], u % 2), a1.reg[r] = Scaling::mul(a1.reg[r], factors[u][1], u % 2);
#pragma unroll
    for (int hm = 0; hm < 2; ++hm) {
      a[u][hm][0] = a0.reg[2 * hm], a[u][hm][1] = a1.reg[2 * hm], a[u][hm][2] = a0.reg[2 * hm + 1], a[u][hm][3] = a1.reg[2 * hm + 1];
    }
    wgmma_fence();
#pragma unroll
    for (int hm = 0; hm < 2; ++hm) {
      const uint32_t slice = (u >> 1) * Layout::kTokens * 128 + ((4 * u + 2 * hm) & 7) * 16;  // unswizzled, as the descriptor wants
      WgmmaM64K16<typename Layout::MmaT, kNt>::run(acc.v, a[u][hm], x_descriptor + (slice >> 4));
    }
    wgmma_commit();
  }
#endif
  return outside;
}

// One CTA's K range, once the grid dependency wait is over. The weight ring as in linear_mma_cta
// (cp.async, each warp its own rows, three steps ahead); x by bulk copies from thread 0: resident,
// the whole range once; else each step into its stage, with one mbarrier per stage, two steps ahead:
// a stage's x is written again only after the CTA barrier that every thread reaches once the MMAs
// of the step that read it are done (linear_wgmma_step), one step after it.
template <class Layout>
__device__ __forceinline__ void linear_wgmma_cta(const LinearArgs& args, const LinearThread& th, int count, uint8_t* smem) {
#if defined(FP4OPS_HW_WGMMA)
  const uint32_t ring = shared_address(smem), stage_bytes = Layout::stage_bytes(th.warps);
  const uint32_t ring_end = ring + Layout::ring_bytes(th.warps), x_resident = ring + Layout::resident_x_offset(th.warps);
  const uint32_t barriers = ring + Layout::barriers_offset(th.warps, args.range_steps);
  const uint8_t* x_image =
      static_cast<const uint8_t*>(args.x) + (static_cast<int64_t>(blockIdx.z) * args.steps + th.step_begin) * Layout::kXStepBytes;
  if (threadIdx.x == 0) {
    for (int b = 0; b < Layout::kBarriers; ++b) mbarrier_init(barriers + 8 * b);
    fence_mbarrier_init();
    if constexpr (Layout::kXResident) {
      const uint32_t bytes = static_cast<uint32_t>(count) * Layout::kXStepBytes;
      mbarrier_arrive_expect_tx(barriers, bytes);
      bulk_copy_to_shared(x_resident, x_image, bytes, barriers);
    }
  }
  __syncthreads();

  const auto next_stage = [&](uint32_t stage) { return stage + stage_bytes == ring_end ? ring : stage + stage_bytes; };
  constexpr int kWeightAhead = kLinearStages - 1, kXAhead = kLinearStages - 2;
  LinearWeightCopies<Layout> weight(args, th, ring + Layout::scale_ring_offset(th.warps) + th.warp * Layout::ScaleRing::kWarpBytes);
  uint32_t weight_stage = ring, x_stage = ring;  // the stages of steps i + kWeightAhead and i + kXAhead
  const auto issue_weight = [&](int i) {
    if (i < count) weight.issue_next(args, th, weight_stage);
    cp_async_commit();
    weight_stage = next_stage(weight_stage);
  };
  [[maybe_unused]] const auto issue_x = [&](int i) {
    if (i < count && threadIdx.x == 0) {
      const uint32_t bar = barriers + 8 * static_cast<uint32_t>(i % kLinearStages);
      mbarrier_arrive_expect_tx(bar, Layout::kXStepBytes);
      bulk_copy_to_shared(x_stage + Layout::x_offset(th.warps), x_image + static_cast<int64_t>(i) * Layout::kXStepBytes, Layout::kXStepBytes, bar);
    }
    x_stage = next_stage(x_stage);
  };
#pragma unroll
  for (int i = 0; i < kWeightAhead; ++i) issue_weight(i);
  if constexpr (Layout::kXResident) {
    mbarrier_wait(barriers, 0);
  } else {
#pragma unroll
    for (int i = 0; i < kXAhead; ++i) issue_x(i);
  }

  const LinearLaneOffsets lane = linear_lane_offsets<Layout>(th);

  LinearAccumulators<Layout> acc;
#pragma unroll
  for (int j = 0; j < Layout::kTokens / 8; ++j) acc.v[j][0] = acc.v[j][1] = acc.v[j][2] = acc.v[j][3] = 0.0f;
  uint32_t fragments[4][2][4];  // the MMAs' A operands, in flight across steps (linear_wgmma_step)

  uint32_t stage = ring;
  uint32_t scales_position = Layout::ScaleRing::position(th.step_begin);  // step i's in the scale ring
  bool outside_seen = false;  // a step outside MXFP4's prescaling window (warp-uniform)
  for (int i = 0; i < count; ++i) {
    cp_async_wait<kWeightAhead - 1>();  // this thread's weight copies of step i have landed ...
    const uint32_t step_scales = linear_step_scales<Layout>(ring, lane, scales_position);
    if constexpr (Layout::kXResident) {
      __syncwarp();  // ... and the warp's (the ring holds only its own rows)
      issue_weight(i + kWeightAhead);
      outside_seen |=
          linear_wgmma_step<Layout>(stage, step_scales, x_resident + static_cast<uint32_t>(i) * Layout::kXStepBytes, lane, acc, fragments);
    } else {
      __syncthreads();  // ... and every thread's; every MMA of step i - 2 is done, so its x is free
      issue_weight(i + kWeightAhead);
      issue_x(i + kXAhead);
      mbarrier_wait(barriers + 8 * static_cast<uint32_t>(i % kLinearStages), static_cast<uint32_t>(i / kLinearStages) & 1);
      outside_seen |= linear_wgmma_step<Layout>(stage, step_scales, stage + Layout::x_offset(th.warps), lane, acc, fragments);
    }
    stage = next_stage(stage);
    scales_position = Layout::ScaleRing::next(scales_position);
  }
  cp_async_wait<0>();
  wgmma_wait<0>();
  if constexpr (!Layout::kNvfp4) {
    // B registers of the outside steps from the x image: register c of lane t is word t of k group 4u + c.
    const auto image_b = [&](int64_t step, int j, int u) {
      const uint8_t* x_step = static_cast<const uint8_t*>(args.x) + (static_cast<int64_t>(blockIdx.z) * args.steps + step) * Layout::kXStepBytes;
      Regs4 b;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        b.reg[c] = reinterpret_cast<const uint32_t*>(x_step + wgmma_x_chunk_offset(Layout::kTokens, 8 * j + th.g, 4 * u + c))[th.t];
      }
      return b;
    };
    if (outside_seen) linear_mxfp4_outside_pass<Layout>(args, th, acc, image_b);
  }
  linear_store_sums<Layout>(args, th, acc);
#endif
}

// Warps of a wgmma kernel's CTAs at most: 12 (three warpgroups) for 128 rows of x, whose
// registers (about 130 a thread for NVFP4; 168 for MXFP4, whose outside pass takes a column tile
// at a time) leave room for them at one CTA per SM, so that each 32 KB x stage can serve 192 weight
// rows and the SM has more warps to hide the MMAs' latency behind (linear_wgmma_128_row_warps picks
// 12 or 8 for each grid). 64 rows: built for 16 at one CTA per SM, which caps the registers at 128
// a thread exactly as two CTAs of 8 warps an SM do, so the same code runs as two 8-warp CTAs an SM
// or one of 12 (linear_wgmma_64_row_warps; never 16). Else 8.
template <int kNt>
constexpr int kLinearWgmmaMaxWarps = kNt == 16 ? 12 : kNt == 8 ? 16 : 8;

// CTAs per SM a wgmma kernel is built for: two of 8 warps with 32 rows; one with 128 rows, whose 64
// accumulators a thread and 32 KB of x a stage leave room for one; one of at most 16 warps with 64
// rows (the register cap of two of 8, above).
template <int kNt>
constexpr int kLinearWgmmaMinCtas = kNt == 4 ? 2 : 1;

// linear_mma_kernel on the warpgroup MMA: x as an x image (dense, or decoded from FP4 x; NVFP4 x to
// prescaled fp16: LinearArgs::x_prescaled), 8 kNt rows per CTA, CTAs of one to three warpgroups.
// Only launched on compute capability 9.0 from a build with an sm_90a pass (csrc/common/arch.h);
// elsewhere its body traps.
template <class Format, typename XT, int kNt, bool kResident>
__global__ void __launch_bounds__(32 * kLinearWgmmaMaxWarps<kNt>, kLinearWgmmaMinCtas<kNt>)
    linear_wgmma_kernel(LinearArgs args) {
#if defined(FP4OPS_HW_WGMMA)
  using Layout = LinearWgmmaLayout<Format, XT, kNt, kResident>;
  extern __shared__ __align__(1024) uint8_t smem_1k[];
  LinearThread th;
  const int count = linear_kernel_begin<Layout>(args, th);
  linear_wgmma_cta<Layout>(args, th, count, smem_1k);
#else
  __trap();
#endif
}

}  // namespace fp4ops::cuda
