// Fused producers (SPEC 7): RMSNorm (+ residual add) and SiLU-and-mul, quantized to NVFP4 / MXFP4
// in the same pass. Raw pointers, no torch headers.
//
// Each kernel computes the fp32 intermediate y with common/producers.h (the CPU kernels' own
// functions) and hands it, block by block, to a sink: BlockQuantizer encodes a block exactly as
// the plain quantizer encodes fp32 input (block_formats.h), AmaxReducer only takes its finite max
// (the first pass of NVFP4 with its own global scale). So a fused result is, by construction, the
// plain quantizer applied to y.
#pragma once

#include <cooperative_groups.h>

#include <cstdint>
#include <type_traits>

#include "../common/producers.h"
#include "async_copy.cuh"
#include "cluster_exchange.cuh"
#include "quantize_kernels.cuh"

namespace fp4ops::cuda {

// RMSNorm: every thread owns 32 consecutive elements of a row (kRmsSpan). A row takes
// row_threads = max(1, P / 32) threads (P the row padded to a power of two): thread t holds
// [32 t, 32 t + 32), zeros past the row. Its pairwise tree over those 32 squares is a subtree of
// SPEC 7's tree, so xor-shuffles (pairs of neighbouring threads, then pairs of pairs) and then the
// same over the row's warps finish that very tree: addition is commutative, so both lanes of a
// shuffle pair compute the same sum.
constexpr int kRmsSpan = 32;
constexpr int kRmsMaxRowThreads = 512;  // rows of up to 16384 elements
constexpr int kRmsMinThreads = 128;     // per CTA: rows_per_cta = blockDim.x / row_threads

// a[i] <- a[i ^ x] for every i (x < N, N a power of two), by conditional swaps: a register array
// indexed by a value known only at run time would live in local memory.
template <int N, typename T>
__device__ __forceinline__ void xor_permute(T (&a)[N], int x) {
#pragma unroll
  for (int bit = 1; bit < N; bit <<= 1) {
    const bool swap = (x & bit) != 0;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      if ((i & bit) == 0) {
        const T low = a[i], high = a[i | bit];
        a[i] = swap ? high : low;
        a[i | bit] = swap ? low : high;
      }
    }
  }
}

// Where the blocks of y go. Both sinks take whole blocks of the format at their index in the
// row-major block order of the output (block b covers elements [b * kBlock, (b + 1) * kBlock)).
// The format is the kernel's own local (as in quantize_kernel), passed in by reference, not a
// member: with the tabulated NVFP4 format held inside the sink next to SwizzledScales, nvcc lost
// the shared-memory table's address (it loaded from address 0).
template <class ScaleIndex>
struct BlockQuantizer {
  uint8_t* __restrict__ data;
  uint8_t* __restrict__ scales;
  ScaleIndex scale_index;

  template <class Format>
  __device__ __forceinline__ void put(const Format& format, int64_t block, const float* y) const {
    put_octets<false>(format, block, y, 0);
  }
  // y's octet o is the block's octet o ^ octet_xor (the scale and its maximum do not depend on the
  // order).
  template <class Format>
  __device__ __forceinline__ void put(const Format& format, int64_t block, const float* y, int octet_xor) const {
    put_octets<true>(format, block, y, octet_xor);
  }
  __device__ __forceinline__ void finish(uint32_t*) const {}

 private:
  template <bool kPermuted, class Format>
  __device__ __forceinline__ void put_octets(const Format& format, int64_t block, const float* y, int octet_xor) const {
    constexpr int kBlock = Format::kBlock;
    float v[kBlock];
#pragma unroll
    for (int i = 0; i < kBlock; ++i) v[i] = y[i];
    const uint32_t m = max_abs_bits(v);  // >= kInfBits: a NaN or Inf in the block
    const bool finite = m < kInfBits;
    const BlockEncoding enc = format.encode(finite ? __uint_as_float(m) : 0.0f, finite);
    uint32_t words[kBlock / 8];
#pragma unroll
    for (int w = 0; w < kBlock / 8; ++w) words[w] = encode_element_octet(enc, v + 8 * w);
    if constexpr (kPermuted) xor_permute(words, octet_xor);
    uint2* out = reinterpret_cast<uint2*>(data + block * (kBlock / 2));  // 8-byte aligned: K % 16 == 0
#pragma unroll
    for (int w = 0; w < kBlock / 16; ++w) __stcs(out + w, make_uint2(words[2 * w], words[2 * w + 1]));
    scales[scale_index.offset(block)] = static_cast<uint8_t>(enc.scale_code);
  }
};

// The first pass of NVFP4 with its own g: blocks of 16 only for their finite max, added to
// *out_bits (zeroed by the primary grid, zero_words_kernel) with one atomicMax per CTA.
struct AmaxTarget {
  static constexpr int kBlock = kNvfp4Block;
  uint32_t* out_bits;
};

struct AmaxReducer {
  uint32_t* out_bits;
  uint32_t max_bits = 0;

  __device__ __forceinline__ void put(const AmaxTarget&, int64_t, const float* y, int = 0) {  // any order
#pragma unroll
    for (int i = 0; i < AmaxTarget::kBlock; ++i) max_bits = max(max_bits, __float_as_uint(finite_abs(y[i])));
  }
  // Every thread of the CTA calls this once, at the end (a CTA-wide reduction).
  __device__ __forceinline__ void finish(uint32_t* scratch) const {
    const uint32_t m = block_reduce_max(max_bits, scratch);
    wait_for_primary_grid();
    if (threadIdx.x == 0 && m != 0) atomicMax(out_bits, m);
  }
};

// Every producer kernel runs as a programmatic dependent of the kernel before it (launch_dependent,
// producers.cu; the one-launch kernels through cooperative_launch.h), so that its launch overlaps
// that kernel's end, and waits for it before reading anything: it may have written x, the residual,
// the norm's weight or g. The exception is AmaxTarget's pass, launched behind zero_words_kernel,
// which writes only the amax word: it reads its input first and waits only before its atomic
// (AmaxReducer::finish).
template <class Source>
__device__ __forceinline__ void wait_for_inputs() {
  if constexpr (!std::is_same_v<Source, AmaxTarget>) wait_for_primary_grid();
}

// The one-launch kernels' shared memory for the exchange: the amax of all of y.
struct AmaxExchangeScratch {
  float amax;
};

// The one-launch kernels' exchange over their cooperative grid (every CTA resident at once): the
// finite amax of y, as the Nvfp4Source that encodes y (g from that amax; CTA 0 writes it to
// g_out). Each CTA writes its threads' maximum to its own word of `cta_max_bits` ([gridDim.x],
// never zeroed: every word is written before the grid barrier and read only after it), then every
// CTA reduces all the words. A max does not depend on the order, so this is the amax the
// two-launch path's atomicMax finds. A grid of one CTA (one row group: a decode step's few rows)
// holds all of y, so its own maximum is the amax: it skips the words and the barrier, a round trip
// to L2 each. Every thread of every CTA calls this once.
__device__ __forceinline__ Nvfp4Source grid_finite_amax(uint32_t thread_max_bits, uint32_t* scratch,
                                                        AmaxExchangeScratch& shared, uint32_t* cta_max_bits, float* g_out) {
  uint32_t all = block_reduce_max(thread_max_bits, scratch);
  if (gridDim.x > 1) {  // the same for every CTA, so every CTA reaches the barrier or none does
    if (threadIdx.x == 0) cta_max_bits[blockIdx.x] = all;
    cooperative_groups::this_grid().sync();  // orders every CTA's word before the reads below
    all = 0;
    for (unsigned b = threadIdx.x; b < gridDim.x; b += blockDim.x) all = max(all, __ldcg(cta_max_bits + b));
    all = block_reduce_max(all, scratch);
  }
  if (threadIdx.x == 0) shared.amax = __uint_as_float(all);
  __syncthreads();
  return Nvfp4Source{&shared.amax, true, g_out};
}

// A source with its read of global memory issued (NVFP4's global scale or amax; the others read
// nothing), so that a kernel can start its other first reads before the value is used
// (make_format) instead of after.
struct Nvfp4SourceRead {
  Nvfp4Source source;
  float value;
};
__device__ __forceinline__ Nvfp4SourceRead read_source(const Nvfp4Source& source) { return {source, source.read()}; }
__device__ __forceinline__ Mxfp4Source read_source(const Mxfp4Source& source) { return source; }
__device__ __forceinline__ AmaxTarget read_source(const AmaxTarget& target) { return target; }

// A CTA's format: NVFP4 tabulates its element multipliers in `table` (and block 0 publishes g,
// Nvfp4Source); MXFP4 is a rule; the amax pass is its target. The caller synchronizes before the
// first put.
__device__ __forceinline__ Nvfp4TabulatedFormat make_format(const Nvfp4SourceRead& read, float* table) {
  const Nvfp4Format format = read.source.make(read.value);
  read.source.publish(format);
  return tabulate_format(format, table);
}
__device__ __forceinline__ Nvfp4TabulatedFormat make_format(const Nvfp4Source& source, float* table) {
  return make_format(read_source(source), table);
}
__device__ __forceinline__ Mxfp4Format make_format(const Mxfp4Source& source, float*) { return source.make(); }
__device__ __forceinline__ AmaxTarget make_format(const AmaxTarget& target, float*) { return target; }

template <class ScaleIndex>
__device__ __forceinline__ BlockQuantizer<ScaleIndex> make_sink(const Nvfp4Source&, uint8_t* data, uint8_t* scales,
                                                                const ScaleIndex& index) {
  return {data, scales, index};
}
template <class ScaleIndex>
__device__ __forceinline__ BlockQuantizer<ScaleIndex> make_sink(const Mxfp4Source&, uint8_t* data, uint8_t* scales,
                                                                const ScaleIndex& index) {
  return {data, scales, index};
}
template <class ScaleIndex>
__device__ __forceinline__ AmaxReducer make_sink(const AmaxTarget& target, uint8_t*, uint8_t*, const ScaleIndex&) {
  return {target.out_bits};
}

// y's fp32 values where a test asked for them (`intermediate` non-null): n floats at `out`,
// 16-byte aligned (row starts are multiples of 16 elements).
template <int kN>
__device__ __forceinline__ void store_intermediate(float* out, const float* y) {
#pragma unroll
  for (int i = 0; i < kN; i += 4) *reinterpret_cast<float4*>(out + i) = make_float4(y[i], y[i + 1], y[i + 2], y[i + 3]);
}

template <typename T, typename W>
struct RmsNormArgs {
  const T* __restrict__ x;         // [rows, hidden]
  const T* __restrict__ residual;  // [rows, hidden], or null
  T* __restrict__ residual_out;    // h = dtype(x + residual), where residual is set
  const W* __restrict__ weight;    // [hidden]
  float* __restrict__ intermediate;  // y [rows, hidden] for tests, or null
  int64_t rows;
  int hidden;       // a multiple of 16, at most kRmsMaxRowThreads * kRmsSpan
  int row_threads;  // a power of two: max(1, next_pow2(hidden) / 32)
  float eps;
  bool staged_rows = false;  // rms_norm_rows_staged (MXFP4, 16-bit x, sm_90+, no residual, row_threads >= 64)
};

// A thread's weights, widened to fp32 once per CTA and kept in dynamic shared memory: quad k of
// thread t at [k * blockDim.x + t], so a warp's reads are consecutive 16-byte words (no bank
// conflicts). Only thread t reads what thread t wrote, so no barrier guards them. A thread keeps
// the same columns for every row it normalizes (rows advance by whole row groups).
constexpr int kRmsWeightQuads = kRmsSpan / 4;
constexpr size_t rms_smem_bytes(int threads) { return static_cast<size_t>(threads) * kRmsSpan * sizeof(float); }

// With octet_xor, slot g holds the weights of the span's octet g ^ octet_xor (rms_norm_rows_staged).
template <typename W>
__device__ __forceinline__ void stage_weights(const W* __restrict__ weight, int valid, float4* staged, int octet_xor = 0) {
#pragma unroll
  for (int g = 0; g < kRmsSpan / 8; ++g) {
    const int octet = g ^ octet_xor;
    float w[8] = {};
    if (octet * 8 < valid) {
      Vec8<W> raw;
      const uint4* src = reinterpret_cast<const uint4*>(weight + 8 * octet);
      uint4* dst = reinterpret_cast<uint4*>(&raw);
#pragma unroll
      for (int i = 0; i < static_cast<int>(sizeof(Vec8<W>) / 16); ++i) dst[i] = __ldg(src + i);
      widen8<W>(raw, w);
    }
    staged[(2 * g) * blockDim.x + threadIdx.x] = make_float4(w[0], w[1], w[2], w[3]);
    staged[(2 * g + 1) * blockDim.x + threadIdx.x] = make_float4(w[4], w[5], w[6], w[7]);
  }
}

// This thread's 32 elements of a row (zeros past `live`), all loads issued before any is used:
// whole spans (every thread but those at the end of a row that is no multiple of 32, or past the
// last row) without per-group predicates.
template <typename T>
__device__ __forceinline__ void load_span(const T* __restrict__ p, int live, Vec8<T> (&out)[kRmsSpan / 8]) {
  if (live == kRmsSpan) {
#pragma unroll
    for (int g = 0; g < kRmsSpan / 8; ++g) out[g] = load_vec8<T, true>(p, g);
    return;
  }
#pragma unroll
  for (int g = 0; g < kRmsSpan / 8; ++g) {
    if (g * 8 < live) {
      out[g] = load_vec8<T, true>(p, g);
    } else {
      uint4* words = reinterpret_cast<uint4*>(&out[g]);
#pragma unroll
      for (int i = 0; i < static_cast<int>(sizeof(Vec8<T>) / 16); ++i) words[i] = make_uint4(0u, 0u, 0u, 0u);
    }
  }
}

// The sum of the row's warps' subtree sums (`row_partials`, kWarps of them) in SPEC 7's tree
// order: pairs of neighbours, then pairs of pairs.
template <int kWarps>
__device__ __forceinline__ float sum_of_row_partials(const float* row_partials) {
  float t[kWarps];
  if constexpr (kWarps == 2) {
    const float2 pair = *reinterpret_cast<const float2*>(row_partials);
    t[0] = pair.x;
    t[1] = pair.y;
  } else {
#pragma unroll
    for (int q = 0; q < kWarps / 4; ++q) {
      const float4 quad = reinterpret_cast<const float4*>(row_partials)[q];
      t[4 * q] = quad.x;
      t[4 * q + 1] = quad.y;
      t[4 * q + 2] = quad.z;
      t[4 * q + 3] = quad.w;
    }
  }
  return pairwise_sum(t);
}

// The shared memory of an RMSNorm CTA besides its staged weights (stage_weights): each warp's
// subtree sum of a row, and each row's rs at the row's first warp.
struct RmsRowScratch {
  alignas(16) float partial[kRmsMaxRowThreads / 32];
  float row_rs[kRmsMaxRowThreads / 32];
};

// rs of this thread's row: `s` (the thread's subtree) summed over the row's row_threads threads
// in SPEC 7's tree order (see kRmsSpan), then rms_inverse. Within a warp, xor-shuffles; where a
// row spans warps, each warp publishes its sum (`partial`) and, after a barrier, the row's first
// warp finishes the tree from shared memory (sum_of_row_partials: a few loads and additions, a
// shorter chain than shuffles) and publishes rs (`row_rs`, at the row's first warp); the other
// warps wait at a second barrier instead of repeating that work (measured: every warp computing
// rs itself after one barrier cost more issue slots than the barrier's wait saved). Every CTA
// thread calls this once per row.
template <typename T, typename W>
__device__ __forceinline__ float row_rms_inverse(float s, const RmsNormArgs<T, W>& args, RmsRowScratch& scratch) {
  if (args.row_threads >= 32) {
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) s = add_rn(s, __shfl_xor_sync(0xFFFFFFFFu, s, offset));
  } else {
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
      if (offset < args.row_threads) s = add_rn(s, __shfl_xor_sync(0xFFFFFFFFu, s, offset));
    }
  }
  const float hidden = static_cast<float>(args.hidden);
  if (args.row_threads <= 32) return rms_inverse(s, hidden, args.eps);
  const int warps = args.row_threads / 32, warp = threadIdx.x / 32;  // warps: 2 to 16, a power of two
  const int first_warp = warp & ~(warps - 1);
  if (threadIdx.x % 32 == 0) scratch.partial[warp] = s;
  __syncthreads();  // every warp's sum is in `partial`
  if (warp == first_warp) {
    const float* row_partials = scratch.partial + first_warp;
    float ss;
    switch (warps) {
      case 2: ss = sum_of_row_partials<2>(row_partials); break;
      case 4: ss = sum_of_row_partials<4>(row_partials); break;
      case 8: ss = sum_of_row_partials<8>(row_partials); break;
      default: ss = sum_of_row_partials<16>(row_partials); break;
    }
    const float rs = rms_inverse(ss, hidden, args.eps);
    if (threadIdx.x % 32 == 0) scratch.row_rs[first_warp] = rs;
  }
  __syncthreads();  // rs is published; `partial` is free for the next row
  return scratch.row_rs[first_warp];
}

// CTAs per SM the kernel is built for: two 512-thread CTAs (at most 64 registers a thread) for
// 16-bit x and NVFP4's 16-element blocks, with or without a residual; one otherwise (fp32 x, or
// MXFP4's 32-element blocks, whose encoder holds a whole block). A row is one CTA's and its threads
// meet twice per row, so the SM overlaps one CTA's loads with another's arithmetic only when it
// holds several.
template <typename T, bool kResidual, class Source>
constexpr int kRmsCtasPerSm = sizeof(T) == 2 && !std::is_same_v<Source, Mxfp4Source> ? 2 : 1;

// The two-launch kernel's own bound: as kRmsCtasPerSm, except that the residual kernel (16-bit x,
// NVFP4, two inputs and two outputs a row) is built for one CTA per SM, where it keeps its row
// loop out of local memory (at 64 registers it spills). The one-launch kernels keep kRmsCtasPerSm.
template <typename T, bool kResidual, class Source>
constexpr int kRmsRowsCtasPerSm = kResidual ? 1 : kRmsCtasPerSm<T, kResidual, Source>;

// Where this thread's span of row row0 + (its row in the CTA's group) lies: its first element's
// offset in x, and how many of its kRmsSpan elements the row holds (0 past the last row).
struct RowSpan {
  int64_t offset;
  int live;
};

// This thread's span in the rows of the CTA's row groups: row0 + its row of the group.
struct RowSpans {
  int first;    // its first column
  int valid;    // the row's elements from there, at most kRmsSpan: 0, 16 or 32
  int own_row;  // its row in the group

  template <typename T, typename W>
  __device__ __forceinline__ explicit RowSpans(const RmsNormArgs<T, W>& args)
      : first((threadIdx.x % args.row_threads) * kRmsSpan),
        valid(max(0, min(kRmsSpan, args.hidden - first))),
        own_row(threadIdx.x / args.row_threads) {}

  template <typename T, typename W>
  __device__ __forceinline__ RowSpan at(const RmsNormArgs<T, W>& args, int64_t row0) const {
    return {(row0 + own_row) * args.hidden + first, row0 + own_row < args.rows ? valid : 0};
  }
};

// This thread's h of its span: x, or with kResidual x + residual, which is also stored to
// residual_out. Zeros past `live`.
template <bool kResidual, typename T, typename W>
__device__ __forceinline__ void load_row_span(const RmsNormArgs<T, W>& args, const RowSpan& span,
                                              Vec8<T> (&h)[kRmsSpan / 8]) {
  load_span(args.x + span.offset, span.live, h);
  if constexpr (kResidual) {
    // Both operands' loads first: the stores of h may alias them as far as the compiler knows,
    // so a load after a store would wait for it.
    Vec8<T> r[kRmsSpan / 8];
    load_span(args.residual + span.offset, span.live, r);
#pragma unroll
    for (int g = 0; g < kRmsSpan / 8; ++g) {
#pragma unroll
      for (int j = 0; j < 8; ++j) h[g].v[j] = from_float<T>(add_rn(to_float(h[g].v[j]), to_float(r[g].v[j])));
      if (g * 8 < span.live) store_vec8(args.residual_out + span.offset + 8 * g, h[g]);
    }
  }
}

// rs of the row whose span this thread holds in h (row_rms_inverse: every CTA thread calls it).
template <typename T, typename W>
__device__ __forceinline__ float span_rms_inverse(const RmsNormArgs<T, W>& args, const Vec8<T> (&h)[kRmsSpan / 8],
                                                  RmsRowScratch& scratch) {
  float v[kRmsSpan];
#pragma unroll
  for (int g = 0; g < kRmsSpan / 8; ++g) widen8<T>(h[g], v + 8 * g);
  return row_rms_inverse(pairwise_sum_of_squares(v), args, scratch);
}

// y of block b (kBlock elements) of this thread's span: (h * rs) * w.
template <int kBlock, typename T>
__device__ __forceinline__ void normalized_block(const Vec8<T> (&h)[kRmsSpan / 8], int b, float rs,
                                                 const float4* staged_weights, float* y) {
#pragma unroll
  for (int g = 0; g < kBlock / 8; ++g) widen8<T>(h[b * kBlock / 8 + g], y + 8 * g);
#pragma unroll
  for (int q = 0; q < kBlock / 4; ++q) {
    const float4 w = staged_weights[(b * kBlock / 4 + q) * blockDim.x + threadIdx.x];
    y[4 * q] = rms_normalized(y[4 * q], rs, w.x);
    y[4 * q + 1] = rms_normalized(y[4 * q + 1], rs, w.y);
    y[4 * q + 2] = rms_normalized(y[4 * q + 2], rs, w.z);
    y[4 * q + 3] = rms_normalized(y[4 * q + 3], rs, w.w);
  }
}

// The CTA's row group at row0 brought to L2 by one thread's bulk prefetch, where the architecture
// has it: issued a row group ahead, so that the group's loads wait on L2 rather than on DRAM while
// DRAM streams the group after it, without registers or shared memory held for it (each row ends
// in two barriers, so the CTA has nothing else in flight while it normalizes). Not with a residual:
// prefetching both inputs there was slower than none (docs/performance.md, "Fused producers").
template <bool kResidual, typename T, typename W>
__device__ __forceinline__ void prefetch_row_group(const RmsNormArgs<T, W>& args, int64_t row0, int rows_per_cta) {
#if defined(FP4OPS_HW_PDL)
  if (kResidual || threadIdx.x != 0 || row0 >= args.rows) return;
  const int64_t rows = args.rows - row0 < rows_per_cta ? args.rows - row0 : rows_per_cta;
  const auto bytes = static_cast<uint32_t>(rows * args.hidden * static_cast<int64_t>(sizeof(T)));  // whole rows: 32-byte multiples
  prefetch_l2_bulk(args.x + row0 * args.hidden, bytes);
#endif
}

// Issued before the wait for the kernel before (wait_for_inputs): one thread brings the norm's
// weight and, with a residual, the CTA's first row group of it to L2. Both are usually older than
// that kernel (the model's weight; the residual stream from the producer a layer back), so a
// decode step's first loads, issued after the wait, find them in L2 rather than DRAM. Safe whatever
// that kernel writes: a prefetch returns nothing to the CTA, and L2 is where every write lands,
// so the loads after the wait read the written values. x is not prefetched: the kernel before
// usually writes it.
template <bool kResidual, typename T, typename W>
__device__ __forceinline__ void prefetch_older_inputs(const RmsNormArgs<T, W>& args, int64_t row0, int rows_per_cta) {
#if defined(FP4OPS_HW_PDL)
  if (threadIdx.x != 0 || row0 >= args.rows) return;
  prefetch_l2_bulk(args.weight, static_cast<uint32_t>(args.hidden * sizeof(W)));  // 16-byte aligned (the launcher)
  if constexpr (kResidual) {
    const int64_t rows = args.rows - row0 < rows_per_cta ? args.rows - row0 : rows_per_cta;
    prefetch_l2_bulk(args.residual + row0 * args.hidden, static_cast<uint32_t>(rows * args.hidden * static_cast<int64_t>(sizeof(T))));
  }
#endif
}

// y of this thread's span of a row (h, its rs), block by block into `sink`, and with
// kMayStoreIntermediate into args.intermediate where a test asked for that copy (stores predicated
// on the pointer still issue in every call, so calls without it run an instance without them).
// With kXorSlots, slot g of h (and of the staged weights) holds the span's octet g ^ octet_xor
// (rms_norm_rows_staged); without, they are in order and octet_xor is 0.
template <bool kXorSlots, bool kMayStoreIntermediate, typename T, typename W, class Format, class Sink>
__device__ __forceinline__ void put_span_blocks(const RmsNormArgs<T, W>& args, const RowSpan& span, const Vec8<T> (&h)[kRmsSpan / 8],
                                                float rs, const Format& format, Sink& sink, const float4* staged_weights,
                                                int octet_xor) {
  constexpr int kBlock = Format::kBlock, kOctets = kBlock / 8;
  // offset is a multiple of the block; divided unsigned, the division is a shift.
  const int64_t first_block = static_cast<int64_t>(static_cast<uint64_t>(span.offset) / kBlock);
  // Slot block b holds the span's block b ^ block_xor, its octets permuted by octet_xor's low bits.
  const int block_xor = octet_xor / kOctets, within_xor = octet_xor % kOctets;
  // Whole blocks only: live is 16 or 32, a multiple of NVFP4's block; MXFP4's hidden is a
  // multiple of 32, so its live is 32.
#pragma unroll
  for (int b = 0; b < kRmsSpan / kBlock; ++b) {
    const int block = b ^ block_xor;
    if (block * kBlock < span.live) {
      float y[kBlock];
      normalized_block<kBlock>(h, b, rs, staged_weights, y);
      if constexpr (kXorSlots) {
        sink.put(format, first_block + block, y, within_xor);
      } else {
        sink.put(format, first_block + block, y);
      }
      if (kMayStoreIntermediate && args.intermediate != nullptr) {
#pragma unroll
        for (int o = 0; o < kOctets; ++o) {
          store_intermediate<8>(args.intermediate + span.offset + 8 * ((b * kOctets + o) ^ octet_xor), y + 8 * o);
        }
      }
    }
  }
}

// A CTA's rows, normalized into `sink` block by block: rows in groups of blockDim.x / row_threads
// per CTA, grid-stride. The weights are staged (stage_weights, then a barrier) and the format is
// ready. With kResidual, h = x + residual is also stored to residual_out (put_span_blocks for
// kMayStoreIntermediate).
template <bool kResidual, bool kMayStoreIntermediate, typename T, typename W, class Format, class Sink>
__device__ __forceinline__ void rms_norm_rows(const RmsNormArgs<T, W>& args, const Format& format, Sink& sink,
                                              const float4* staged_weights, RmsRowScratch& scratch) {
  const int rows_per_cta = blockDim.x / args.row_threads;
  // Rows advance by whole row groups (row0 is the CTA's group, the same in all its threads), so
  // every thread runs the loop the same number of times (row_rms_inverse synchronizes).
  const int64_t row_step = static_cast<int64_t>(gridDim.x) * rows_per_cta;
  const RowSpans spans(args);
  for (int64_t row0 = static_cast<int64_t>(blockIdx.x) * rows_per_cta; row0 < args.rows; row0 += row_step) {
    prefetch_row_group<kResidual>(args, row0 + row_step, rows_per_cta);
    const RowSpan span = spans.at(args, row0);
    Vec8<T> h[kRmsSpan / 8];
    load_row_span<kResidual>(args, span, h);
    const float rs = span_rms_inverse(args, h, scratch);
    put_span_blocks<false, kMayStoreIntermediate>(args, span, h, rs, format, sink, staged_weights, 0);
  }
}

#if defined(FP4OPS_HW_PDL)
// rms_norm_rows with the rows arriving in shared memory ahead of their use: one thread bulk-copies
// the CTA's next row group into the stage (`stage`, rows_per_cta * hidden elements after the
// weights) as soon as every thread has read the current one (the row's first barrier, in
// row_rms_inverse: hence row_threads >= 64), so the copy runs while the CTA normalizes and encodes
// this group, and each thread's loads are shared ones that the copy has already filled; the group
// after it is prefetched to L2 first. The same spans, the same operations, the same y. The first
// copy is issued before the weights are staged (rms_norm_quantize_kernel).
template <typename T, typename W>
__device__ __forceinline__ void copy_row_group(const RmsNormArgs<T, W>& args, int64_t row0, int rows_per_cta,
                                               uint32_t stage, uint32_t full) {
  if (threadIdx.x != 0 || row0 >= args.rows) return;
  const int64_t rows = args.rows - row0 < rows_per_cta ? args.rows - row0 : rows_per_cta;
  const auto bytes = static_cast<uint32_t>(rows * args.hidden * static_cast<int64_t>(sizeof(T)));  // 32-byte multiples
  fence_proxy_async_shared();  // the threads' reads of the stage (ordered by the barrier) come first
  mbarrier_arrive_expect_tx(full, bytes);
  bulk_copy_to_shared(stage, args.x + row0 * args.hidden, bytes, full);
}

// The order in which a thread reads its span's four 16-byte octets from the stage: slot g is octet
// g ^ staged_octet_xor(). A 16-byte shared load is served 8 lanes at a time, and the spans of
// neighbouring lanes lie 64 bytes apart, so in order the 8 lanes would hit 2 of the 8 16-byte bank
// groups (4-way conflicts); XOR-ing by (lane / 2) % 4 gives the 4 lanes of each parity 4 distinct
// octets, and the 8 lanes 8 distinct bank groups.
__device__ __forceinline__ int staged_octet_xor() { return (threadIdx.x >> 1) & 3; }

template <bool kMayStoreIntermediate, typename T, typename W, class Format, class Sink>
__device__ __forceinline__ void rms_norm_rows_staged(const RmsNormArgs<T, W>& args, const Format& format, Sink& sink,
                                                     const float4* staged_weights, RmsRowScratch& scratch,
                                                     uint32_t stage, uint32_t full) {
  const int rows_per_cta = blockDim.x / args.row_threads;
  const int64_t row_step = static_cast<int64_t>(gridDim.x) * rows_per_cta;
  const RowSpans spans(args);
  const uint32_t span_in_stage = stage + static_cast<uint32_t>((spans.own_row * args.hidden + spans.first) * sizeof(T));
  const int octet_xor = staged_octet_xor();
  uint32_t parity = 0;
  for (int64_t row0 = static_cast<int64_t>(blockIdx.x) * rows_per_cta; row0 < args.rows; row0 += row_step) {
    prefetch_row_group<false>(args, row0 + 2 * row_step, rows_per_cta);
    const RowSpan span = spans.at(args, row0);
    mbarrier_wait(full, parity);
    parity ^= 1;
    Vec8<T> h[kRmsSpan / 8];
#pragma unroll
    for (int g = 0; g < kRmsSpan / 8; ++g) {
      const int octet = g ^ octet_xor;
      const uint4 words = octet * 8 < span.live ? lds_128(span_in_stage + octet * 16) : make_uint4(0u, 0u, 0u, 0u);
      h[g] = *reinterpret_cast<const Vec8<T>*>(&words);
    }
    // h in slot order: SPEC 7's tree adds the span's octets in pairs, then the pairs, and a slot
    // order that only swaps octets within a pair, or the two pairs, adds the same operands at every
    // node (addition commutes, bit for bit), so rs is the same.
    const float rs = span_rms_inverse(args, h, scratch);  // past its first barrier, the stage is free
    copy_row_group(args, row0 + row_step, rows_per_cta, stage, full);
    put_span_blocks<true, kMayStoreIntermediate>(args, span, h, rs, format, sink, staged_weights, octet_xor);
  }
}
#endif

// Stages this thread's weights (the same span in every row it normalizes), then a barrier that
// also covers whatever the CTA wrote to shared memory before (the format's table).
template <typename T, typename W>
__device__ __forceinline__ void stage_row_weights(const RmsNormArgs<T, W>& args, float4* staged_weights, int octet_xor = 0) {
  const RowSpans spans(args);
  stage_weights(args.weight + spans.first, spans.valid, staged_weights, octet_xor);
  __syncthreads();
}

// stage_row_weights with the CTA's format built from `read` (read_source, issued before the
// weights' loads) between the staging and the barrier, which then covers the format's table too:
// NVFP4's read of g is in flight with the weights' loads instead of ahead of them.
template <typename T, typename W, class SourceRead>
__device__ __forceinline__ auto stage_row_weights_and_format(const RmsNormArgs<T, W>& args, float4* staged_weights,
                                                             const SourceRead& read, float* table, int octet_xor = 0) {
  const RowSpans spans(args);
  stage_weights(args.weight + spans.first, spans.valid, staged_weights, octet_xor);
  const auto format = make_format(read, table);
  __syncthreads();
  return format;
}

// One launch: rms_norm_rows into the source's sink; dynamic shared memory
// rms_smem_bytes(blockDim.x), the weights. Source is Nvfp4Source, Mxfp4Source or AmaxTarget (the
// first pass of NVFP4 with its own g, which also writes the new residual; its second pass runs
// this kernel on that residual without one).
template <typename T, typename W, bool kResidual, class Source, class ScaleIndex>
__global__ void __launch_bounds__(kRmsMaxRowThreads, (kRmsRowsCtasPerSm<T, kResidual, Source>)) rms_norm_quantize_kernel(
    RmsNormArgs<T, W> args, Source source, uint8_t* __restrict__ data, uint8_t* __restrict__ scales,
    ScaleIndex scale_index) {
  let_dependents_launch();
  const int rows_per_cta = blockDim.x / args.row_threads;
  prefetch_older_inputs<kResidual>(args, static_cast<int64_t>(blockIdx.x) * rows_per_cta, rows_per_cta);
  prefetch_source(source);
  wait_for_inputs<Source>();
  extern __shared__ float4 staged_weights[];
  __shared__ float table[Nvfp4TabulatedFormat::kCodes];
  __shared__ RmsRowScratch row_scratch;
  __shared__ uint32_t scratch[32];
  const auto read = read_source(source);
  auto sink = make_sink(source, data, scales, scale_index);
#if defined(FP4OPS_HW_PDL)
  if constexpr (!kResidual && sizeof(T) == 2 && std::is_same_v<Source, Mxfp4Source>) {
    if (args.staged_rows) {
      __shared__ uint64_t stage_full;
      const uint32_t full = shared_address(&stage_full);
      const uint32_t stage = shared_address(staged_weights + blockDim.x * kRmsWeightQuads);
      prefetch_row_group<false>(args, (static_cast<int64_t>(blockIdx.x) + gridDim.x) * rows_per_cta, rows_per_cta);
      if (threadIdx.x == 0) {
        mbarrier_init(full);
        fence_mbarrier_init();
      }
      copy_row_group(args, static_cast<int64_t>(blockIdx.x) * rows_per_cta, rows_per_cta, stage, full);
      // In the order the rows are read (staged_octet_xor); its barrier also publishes the mbarrier.
      const auto format = stage_row_weights_and_format(args, staged_weights, read, table, staged_octet_xor());
      if (args.intermediate != nullptr) {
        rms_norm_rows_staged<true>(args, format, sink, staged_weights, row_scratch, stage, full);
      } else {
        rms_norm_rows_staged<false>(args, format, sink, staged_weights, row_scratch, stage, full);
      }
      sink.finish(scratch);
      return;
    }
  }
#endif
  prefetch_row_group<kResidual>(args, static_cast<int64_t>(blockIdx.x) * rows_per_cta, rows_per_cta);
  const auto format = stage_row_weights_and_format(args, staged_weights, read, table);
  if constexpr (kResidual) {
    // One loop instance, its stores predicated: the residual kernel sits at its register bound,
    // where a second instance changes ptxas' allocation of both.
    rms_norm_rows<true, true>(args, format, sink, staged_weights, row_scratch);
  } else if (args.intermediate != nullptr) {
    rms_norm_rows<false, true>(args, format, sink, staged_weights, row_scratch);
  } else {
    rms_norm_rows<false, false>(args, format, sink, staged_weights, row_scratch);
  }
  sink.finish(scratch);
}

// NVFP4 with its own g in one launch and one read, for rows that fit one launch's CTAs at once (a
// decode step, a prefill chunk): CTAs that hold every row group at once (one each), each thread its
// span of h in registers. The CTAs exchange the amax of y (`exchange_amax(thread's max bits,
// scratch, amax scratch)`, the Nvfp4Source of y, after `begin_exchange()` on entry), then each
// thread encodes its y: the same y and the same amax as the two-launch path, so the same bytes. The
// instance built for a CTA per SM keeps y across the exchange (registers to spare). The one built
// for kCtasPerSm = 2 (at most 64 registers a thread, as the two-launch kernel) keeps only h, a
// 16-bit span in 16 registers, and computes y again from it (the same operations: the same y), so
// that it holds twice the rows. The row is loaded before the weights are staged, so that
// both loads are in flight at once. Dynamic shared memory as rms_norm_quantize_kernel.
template <typename T, typename W, bool kResidual, class ScaleIndex, int kCtasPerSm, typename BeginExchange,
          typename ExchangeAmax>
__device__ __forceinline__ void rms_norm_quantize_one_launch(const RmsNormArgs<T, W>& args, uint8_t* __restrict__ data,
                                                             uint8_t* __restrict__ scales, const ScaleIndex& scale_index,
                                                             BeginExchange&& begin_exchange, ExchangeAmax&& exchange_amax) {
  let_dependents_launch();
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * (blockDim.x / args.row_threads);
  prefetch_older_inputs<kResidual>(args, row0, blockDim.x / args.row_threads);
  wait_for_primary_grid();
  constexpr int kBlock = kNvfp4Block;
  extern __shared__ float4 staged_weights[];
  __shared__ float table[Nvfp4TabulatedFormat::kCodes];
  __shared__ RmsRowScratch row_scratch;
  __shared__ uint32_t scratch[32];
  __shared__ AmaxExchangeScratch amax_scratch;
  begin_exchange();

  const RowSpan span = RowSpans(args).at(args, row0);
  Vec8<T> h[kRmsSpan / 8];
  load_row_span<kResidual>(args, span, h);
  stage_row_weights(args, staged_weights);
  const float rs = span_rms_inverse(args, h, row_scratch);
  constexpr bool kHoldY = kCtasPerSm == 1;  // registers to spare: y is kept rather than computed again
  [[maybe_unused]] float held[kHoldY ? kRmsSpan : 1];
  AmaxReducer reducer{nullptr};
#pragma unroll
  for (int b = 0; b < kRmsSpan / kBlock; ++b) {
    if (b * kBlock < span.live) {
      float y[kBlock];
      normalized_block<kBlock>(h, b, rs, staged_weights, y);
      reducer.put(AmaxTarget{nullptr}, 0, y);
      if constexpr (kHoldY) {
#pragma unroll
        for (int i = 0; i < kBlock; ++i) held[b * kBlock + i] = y[i];
      }
    }
  }

  const auto format = make_format(exchange_amax(reducer.max_bits, scratch, amax_scratch), table);
  __syncthreads();  // the format's table
  const BlockQuantizer<ScaleIndex> sink{data, scales, scale_index};
#pragma unroll
  for (int b = 0; b < kRmsSpan / kBlock; ++b) {
    if (b * kBlock < span.live) {
      float y[kBlock];
      if constexpr (kHoldY) {
#pragma unroll
        for (int i = 0; i < kBlock; ++i) y[i] = held[b * kBlock + i];
      } else {
        normalized_block<kBlock>(h, b, rs, staged_weights, y);
      }
      sink.put(format, static_cast<int64_t>(static_cast<uint64_t>(span.offset) / kBlock) + b, y);
      if (args.intermediate != nullptr) store_intermediate<kBlock>(args.intermediate + span.offset + b * kBlock, y);
    }
  }
}

// rms_norm_quantize_one_launch over a cooperative grid (every CTA resident at once), exchanging
// through grid_finite_amax; cta_max_bits: its words, one per CTA.
template <typename T, typename W, bool kResidual, class ScaleIndex, int kCtasPerSm>
__global__ void __launch_bounds__(kRmsMaxRowThreads, kCtasPerSm) rms_norm_quantize_one_launch_kernel(
    RmsNormArgs<T, W> args, float* __restrict__ g_out, uint8_t* __restrict__ data, uint8_t* __restrict__ scales,
    ScaleIndex scale_index, uint32_t* __restrict__ cta_max_bits) {
  rms_norm_quantize_one_launch<T, W, kResidual, ScaleIndex, kCtasPerSm>(
      args, data, scales, scale_index, [] {},
      [&](uint32_t thread_max_bits, uint32_t* scratch, AmaxExchangeScratch& amax_scratch) {
        return grid_finite_amax(thread_max_bits, scratch, amax_scratch, cta_max_bits, g_out);
      });
}

// rms_norm_quantize_one_launch over one thread-block cluster (compute capability 9.0 on),
// exchanging through its CTAs' shared memory (cluster_exchange.cuh): no round trip to L2 and no
// grid barrier. Built for a CTA per SM (y held).
template <typename T, typename W, bool kResidual, class ScaleIndex>
__global__ void __launch_bounds__(kRmsMaxRowThreads, 1) rms_norm_quantize_cluster_kernel(
    RmsNormArgs<T, W> args, float* __restrict__ g_out, uint8_t* __restrict__ data, uint8_t* __restrict__ scales,
    ScaleIndex scale_index) {
  __shared__ ClusterExchange exchange;
  rms_norm_quantize_one_launch<T, W, kResidual, ScaleIndex, 1>(
      args, data, scales, scale_index, [&] { cluster_exchange_begin(exchange); },
      [&](uint32_t thread_max_bits, uint32_t* scratch, AmaxExchangeScratch&) {
        const uint32_t all = cluster_finite_max(block_reduce_max(thread_max_bits, scratch), exchange);
        return Nvfp4SourceRead{Nvfp4Source{nullptr, true, g_out}, __uint_as_float(all)};
      });
}

// SiLU-and-mul: grid-stride over the output's blocks of kBlock elements (the sink's block); block
// u of row r reads gate elements [c, c + kBlock) and up elements [H + c, H + c + kBlock) of row r.
template <typename T>
struct SiluMulArgs {
  const T* __restrict__ x;  // [rows, 2 * width]
  float* __restrict__ intermediate;  // y [rows, width] for tests, or null
  int64_t num_blocks;       // rows * width / kBlock
  int64_t blocks_per_row;   // width / kBlock
  FastDivU32 by_blocks_per_row;  // valid where num_blocks < 2^32
  int64_t width;
};

// The gate and up elements of output block u (kBlock elements each), as loaded.
template <int kBlock, typename T>
struct SiluMulInputs {
  Vec8<T> gate[kBlock / 8], up[kBlock / 8];
};

// Where output block u's gate elements start in x (its up elements: args.width further on).
template <int kBlock, typename T>
__device__ __forceinline__ const T* silu_mul_gate_of_block(const SiluMulArgs<T>& args, int64_t u) {
  const bool small = args.num_blocks < (int64_t{1} << 32);
  const int64_t row = small ? args.by_blocks_per_row.div(static_cast<uint32_t>(u)) : u / args.blocks_per_row;
  return args.x + row * 2 * args.width + (u - row * args.blocks_per_row) * kBlock;
}

template <int kBlock, typename T>
__device__ __forceinline__ SiluMulInputs<kBlock, T> load_silu_mul_inputs(const SiluMulArgs<T>& args, int64_t u) {
  const T* gate = silu_mul_gate_of_block<kBlock>(args, u);
  SiluMulInputs<kBlock, T> in;
#pragma unroll
  for (int g = 0; g < kBlock / 8; ++g) {
    in.gate[g] = load_vec8<T, true>(gate, g);
    in.up[g] = load_vec8<T, true>(gate + args.width, g);
  }
  return in;
}

// y of an output block from its inputs.
template <int kBlock, typename T>
__device__ __forceinline__ void silu_mul_of(const SiluMulInputs<kBlock, T>& in, float* y) {
  float up[8];
#pragma unroll
  for (int g = 0; g < kBlock / 8; ++g) {
    widen8<T>(in.gate[g], y + 8 * g);
    widen8<T>(in.up[g], up);
#pragma unroll
    for (int j = 0; j < 8; ++j) y[8 * g + j] = silu_mul(y[8 * g + j], up[j]);
  }
}

// y of output block u (kBlock elements).
template <int kBlock, typename T>
__device__ __forceinline__ void silu_mul_block(const SiluMulArgs<T>& args, int64_t u, float* y) {
  silu_mul_of(load_silu_mul_inputs<kBlock>(args, u), y);
}

// The blocks of y of this thread (grid-stride) into the source's sink. NVFP4 reads its g from
// global memory before the format's table is built: there the thread's first block is loaded
// before that read is waited for, so that the two wait together rather than one after another
// (the other sources read nothing and keep the plain loop).
template <typename T, class Source, class ScaleIndex>
__global__ void silu_mul_quantize_kernel(SiluMulArgs<T> args, Source source, uint8_t* __restrict__ data,
                                         uint8_t* __restrict__ scales, ScaleIndex scale_index) {
  let_dependents_launch();
  prefetch_source(source);
  wait_for_inputs<Source>();
  constexpr int kBlock = decltype(make_format(source, nullptr))::kBlock;
  constexpr bool kFirstBlockEarly = std::is_same_v<Source, Nvfp4Source>;
  __shared__ float table[Nvfp4TabulatedFormat::kCodes];
  __shared__ uint32_t scratch[32];
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const auto read = read_source(source);
  [[maybe_unused]] SiluMulInputs<kBlock, T> early;
  if (kFirstBlockEarly && first < args.num_blocks) early = load_silu_mul_inputs<kBlock>(args, first);
  const auto format = make_format(read, table);
  auto sink = make_sink(source, data, scales, scale_index);
  __syncthreads();  // the format's table
  const auto emit = [&](int64_t u, const float* y) {
    sink.put(format, u, y);
    if (args.intermediate != nullptr) store_intermediate<kBlock>(args.intermediate + u * kBlock, y);
  };
  if (kFirstBlockEarly && first < args.num_blocks) {
    float y[kBlock];
    silu_mul_of(early, y);
    emit(first, y);
  }
  for (int64_t u = kFirstBlockEarly ? first + stride : first; u < args.num_blocks; u += stride) {
    float y[kBlock];
    silu_mul_block<kBlock>(args, u, y);
    emit(u, y);
  }
  sink.finish(scratch);
}

// NVFP4 with its own g in one launch and one read, as rms_norm_quantize_one_launch_kernel: a
// cooperative grid of kSiluOneLaunchThreads-thread CTAs whose threads hold every output block at
// once. With one block a thread (kBlocksPerThread = 1) each thread keeps its y across the exchange.
// With two (16-bit x: blocks u and u + the grid's threads, so that each load stays coalesced) it
// keeps their inputs, 16 registers, and computes y again after the exchange (the same operations:
// the same y), so that at most 64 registers a thread (1024 threads per SM) hold twice the blocks;
// its CTAs have kSiluOneLaunchThreads to kSiluOneLaunchMaxThreads threads (the launcher's choice).
constexpr int kSiluOneLaunchThreads = 256, kSiluOneLaunchMaxThreads = 1024;

template <typename T, class ScaleIndex, int kBlocksPerThread>
__global__ void __launch_bounds__(kBlocksPerThread == 1 ? kSiluOneLaunchThreads : kSiluOneLaunchMaxThreads, 1)
    silu_mul_quantize_one_launch_kernel(
    SiluMulArgs<T> args, float* __restrict__ g_out, uint8_t* __restrict__ data, uint8_t* __restrict__ scales,
    ScaleIndex scale_index, uint32_t* __restrict__ cta_max_bits) {
  let_dependents_launch();
  wait_for_primary_grid();
  constexpr int kBlock = kNvfp4Block;
  static_assert(kBlocksPerThread == 1 || (kBlocksPerThread == 2 && sizeof(T) == 2), "two blocks a thread: 16-bit x");
  __shared__ float table[Nvfp4TabulatedFormat::kCodes];
  __shared__ uint32_t scratch[32];
  __shared__ AmaxExchangeScratch amax_scratch;
  AmaxReducer reducer{nullptr};
  if constexpr (kBlocksPerThread == 1) {
    const int64_t u = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const bool live = u < args.num_blocks;
    float y[kBlock];
    if (live) {
      silu_mul_block<kBlock>(args, u, y);
      reducer.put(AmaxTarget{nullptr}, 0, y);
    }
    const auto format = make_format(grid_finite_amax(reducer.max_bits, scratch, amax_scratch, cta_max_bits, g_out), table);
    __syncthreads();  // the format's table
    if (live) {
      const BlockQuantizer<ScaleIndex> sink{data, scales, scale_index};
      sink.put(format, u, y);
      if (args.intermediate != nullptr) store_intermediate<kBlock>(args.intermediate + u * kBlock, y);
    }
  } else {
    const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    SiluMulInputs<kBlock, T> in[kBlocksPerThread];
#pragma unroll
    for (int b = 0; b < kBlocksPerThread; ++b) {
      if (first + b * stride < args.num_blocks) in[b] = load_silu_mul_inputs<kBlock>(args, first + b * stride);
    }
#pragma unroll
    for (int b = 0; b < kBlocksPerThread; ++b) {
      if (first + b * stride < args.num_blocks) {
        float y[kBlock];
        silu_mul_of(in[b], y);
        reducer.put(AmaxTarget{nullptr}, 0, y);
      }
    }
    const auto format = make_format(grid_finite_amax(reducer.max_bits, scratch, amax_scratch, cta_max_bits, g_out), table);
    __syncthreads();  // the format's table
    const BlockQuantizer<ScaleIndex> sink{data, scales, scale_index};
#pragma unroll
    for (int b = 0; b < kBlocksPerThread; ++b) {
      const int64_t u = first + b * stride;
      if (u < args.num_blocks) {
        float y[kBlock];
        silu_mul_of(in[b], y);
        sink.put(format, u, y);
        if (args.intermediate != nullptr) store_intermediate<kBlock>(args.intermediate + u * kBlock, y);
      }
    }
  }
}

}  // namespace fp4ops::cuda
