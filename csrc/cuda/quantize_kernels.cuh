// NVFP4 / MXFP4 quantize kernels (SPEC 2, 3): raw pointers, no torch headers.
//
// Quantize work unit: a "chunk" of 32 input bytes per thread and step (16 bf16/fp16 elements or 8
// fp32 ones: two 16-byte loads; 8 or 4 bytes of packed codes out). A scale block of
// Format::kBlock elements spans kBlock / chunk adjacent lanes (1 or 2 for NVFP4, 2 or 4 for
// MXFP4), which combine their maxima with xor-shuffles; every lane of a block then derives the
// same scale (SIMT makes the redundant work free) and packs its own codes. Wide chunks amortize
// the exact scale math (three correctly rounded divisions for NVFP4) over more elements.
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>

#include "../common/block_formats.h"
#include "../common/scale_layout.h"
#include "amax_kernels.cuh"
#include "async_copy.cuh"
#include "cluster_exchange.cuh"
#include "element_types.cuh"

namespace fp4ops::cuda {

// Where a kernel gets its format. NVFP4's global scale never leaves the device: it is read from
// `scale` (g itself, or the amax to derive g from) and block 0 writes the g it used to
// `scale_out` and `scale_out_copy` where they are set (the copy saves the recipe op a copy
// kernel when one direction is off and returns the other's g).
struct Nvfp4Source {
  using Format = Nvfp4Format;
  const float* scale;
  bool scale_is_amax;
  float* scale_out;
  float* scale_out_copy = nullptr;

  // make() in two steps, for kernels that issue the read ahead of its use: read(), then make(value).
  __device__ __forceinline__ float read() const { return *scale; }
  __device__ __forceinline__ Nvfp4Format make(float value) const {
    return {scale_is_amax ? nvfp4_global_scale_from_amax(value) : value};
  }
  __device__ __forceinline__ Nvfp4Format make() const { return make(read()); }
  __device__ __forceinline__ void publish(const Nvfp4Format& format) const {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    if (scale_out != nullptr) *scale_out = format.global_scale;
    if (scale_out_copy != nullptr) *scale_out_copy = format.global_scale;
  }
};

struct Mxfp4Source {
  using Format = Mxfp4Format;
  Mxfp4ScaleRule rule;

  __device__ __forceinline__ Mxfp4Format make() const { return {rule}; }
  __device__ __forceinline__ void publish(const Mxfp4Format&) const {}
};

// Issued before a kernel waits for the one before it (programmatic dependent launch): one thread
// per CTA brings the line of NVFP4's `scale` to L2, so that the read after the wait finds it there.
// A given g is written once and read once per layer, and leaves L2 while the layers between stream
// their weights; read after the wait, its trip to DRAM would come before the kernel's first
// loads. Safe whatever the kernel before writes (g itself, with its own g): a prefetch returns
// nothing to the CTA, and L2 is where every write lands. MXFP4 and the amax pass read nothing.
template <class Source>
__device__ __forceinline__ void prefetch_source(const Source& source) {
#if defined(FP4OPS_HW_PDL)
  if constexpr (std::is_same_v<Source, Nvfp4Source>) {
    if (threadIdx.x == 0) prefetch_l2(source.scale);
  }
#endif
}

// The codes of eight loaded elements of a block encoded as `enc` (encode_element_octet on the
// widened values; bf16 widened partly on the FMA pipe, which this loop leaves idle). MXFP4 of bf16
// x without FP4 instructions skips the widening: its element multiplier 2^(127 - e) is a power of
// two that bf16 holds (e <= 253 for a finite block), so x * 2^(127 - e) in bf16x2 is exact
// wherever it is 2^-126 or more, and below that it is an E2M1 zero of x's sign either way. The
// products are encoded as they are: no fp32 multiplies, no widening, no round-to-odd step.
template <class Format, typename T>
__device__ __forceinline__ uint32_t encode_loaded_octet(const BlockEncoding& enc, const Vec8<T>& raw) {
#if defined(__CUDA_ARCH__) && !defined(FP4OPS_HW_FP4)
  if constexpr (std::is_same_v<T, __nv_bfloat16> && std::is_same_v<Format, Mxfp4Format>) {
    const uint32_t half_bits = __float_as_uint(enc.element_multiplier) >> 16;  // exact: a power of two
    const __nv_bfloat162 multiplier = bits_as_pair<__nv_bfloat16>(half_bits | half_bits << 16);
    const uint32_t* words = reinterpret_cast<const uint32_t*>(&raw);
    uint32_t products[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) products[j] = pair_as_bits(__hmul2(bits_as_pair<__nv_bfloat16>(words[j]), multiplier));
    const uint32_t word = e2m1x8_encode_16bit_not_nan<__nv_bfloat16>(products);
    return enc.zero_codes ? 0u : word;
  }
#endif
  float v[8];
  widen8<T, /*kHighHalfOnFmaPipe=*/true>(raw, v);
  return encode_element_octet(enc, v);
}

// Quantize chunks [0, num_chunks) from this thread's grid-stride share. The loop runs warp-
// uniformly so every lane takes part in the shuffles; lanes past the end redo the last item and
// store nothing. Requires blockDim.x and the stride to be multiples of 32.
template <typename T, bool kAligned, class Format, class ScaleIndex>
__device__ __forceinline__ void quantize_chunks(const T* __restrict__ x,  // [num_chunks * kN]
                                                int64_t num_chunks, int64_t first, int64_t stride,
                                                const Format& format,
                                                uint8_t* __restrict__ data,    // [num_chunks * kN / 2]
                                                uint8_t* __restrict__ scales,  // block b at scale_index.offset(b)
                                                const ScaleIndex& scale_index)
{
  constexpr int kN = kElemsPer32Bytes<T>;
  constexpr int kLanesPerBlock = Format::kBlock / kN;
  using Codes = std::conditional_t<kN == 16, uint2, uint32_t>;  // kN / 2 bytes of codes
  const int lane = threadIdx.x % 32;
  for (int64_t warp_base = first - lane; warp_base < num_chunks; warp_base += stride) {
    // Work item u (scale-memory order, see ScaleIndex) is chunk c: lane u % kLanesPerBlock of
    // block u / kLanesPerBlock's position in the layout's walk. Lanes past the end redo the last
    // item and store nothing: a block's lanes are all past the end or none is (num_chunks counts
    // whole blocks, warp_base is a multiple of 32), so their maxima never meet a live block's,
    // and no registers are zeroed per step for them. u is unsigned so that / and % are shifts.
    const bool active = warp_base + lane < num_chunks;
    const uint64_t u = static_cast<uint64_t>(active ? warp_base + lane : num_chunks - 1);
    const int64_t position = static_cast<int64_t>(u / kLanesPerBlock);  // in the layout's walk
    const int64_t block = scale_index.block_at(position);
    const int64_t c = block * kLanesPerBlock + static_cast<int64_t>(u % kLanesPerBlock);
    Vec8<T> raw[kN / 8];
#pragma unroll
    for (int g = 0; g < kN / 8; ++g) raw[g] = load_vec8<T, kAligned>(x, c * (kN / 8) + g);
    // On the loaded words for 16-bit x (max_abs_bits16: half the ALU-pipe instructions of the
    // max on widened values; the ALU pipe is this loop's busiest: docs/performance.md, "What
    // bounds each op").
    uint32_t m = loaded_max_bits(raw);
#pragma unroll
    for (int offset = 1; offset < kLanesPerBlock; offset <<= 1) m = max(m, __shfl_xor_sync(0xFFFFFFFFu, m, offset));
    const bool finite = m < kInfBits;
    const BlockEncoding enc = format.encode(finite ? __uint_as_float(m) : 0.0f, finite);
    uint32_t words[kN / 8];
#pragma unroll
    for (int w = 0; w < kN / 8; ++w) words[w] = encode_loaded_octet<Format>(enc, raw[w]);
    if (active) {
      __stcs(reinterpret_cast<Codes*>(data) + c, *reinterpret_cast<const Codes*>(words));
      if (u % kLanesPerBlock == 0) scales[scale_index.scale_at(position, block)] = static_cast<uint8_t>(enc.scale_code);
    }
  }
}

// SPEC 2.3's block scale code sb = e4m3((bmax / 6) / g) without the two divisions, wherever a
// bracket decides it. With K = (1 / 6) / g (both divisions correctly rounded), the exact chain's
// quotient t and bmax K differ by a factor within 1 +- 5.1 x 2^-24 (five roundings, none of them
// subnormal where sb can be nonzero: scale_bracket_for's range), so t lies between
// bmax (K (1 - 2^-20)) and bmax (K (1 + 2^-20)), each product and factor rounded once more.
// E4M3's rounding is monotone: where both ends give one code, t gives it too. Otherwise (t within
// ~2^-20 of a rounding boundary: about one block in 2^15 of random data, more for data on a
// coarse grid) the caller divides. Two multiplies, one paired conversion and a compare per block
// instead of the divisions: a shorter dependent chain, which pays where the loop is
// latency-bound rather than memory-bound (chosen by measurement: docs/performance.md,
// "Quantizer: block-scale bracket").
struct ScaleBracket {
  float low = 0.0f;                                       // K (1 - 2^-20); 0 with high = Inf: off
  float high = std::numeric_limits<float>::infinity();    // K (1 + 2^-20)

  // Whether the bracket decides bmax's code (then in *code). Off: the low end's code is 0 and the
  // high end's 0x7E (Inf) or 0x7F (0 x Inf is NaN), never equal.
  __device__ __forceinline__ bool decides(float block_max, uint32_t* code) const {
#if defined(FP4OPS_HW_E4M3)
    uint32_t ends;  // e4m3 of the high end in byte 1, of the low end in byte 0
    asm("{\n\t.reg .b16 pair;\n\t"
        "cvt.rn.satfinite.e4m3x2.f32 pair, %1, %2;\n\t"
        "mov.b32 %0, {pair, 0};\n\t}"
        : "=r"(ends)
        : "f"(block_max * high), "f"(block_max * low));
    *code = ends & 0xFFu;
    return (ends >> 8) == *code;
#else
    return false;
#endif
  }
};

// 1 / 6 rounded to fp32 as div_rn rounds it, a constant: __fdiv_rn is not folded at compile time,
// and the division would sit on the chain from g's read to the CTA's first barrier.
constexpr float kInverseE2M1Max = 0x1.555556p-3f;
static_assert(kInverseE2M1Max == 1.0f / kE2M1Max, "1 / 6 rounded to nearest");

// The bracket for g where 2^-100 <= g <= 2^100, off otherwise. The range keeps K normal, and keeps
// bmax / 6 normal wherever sb can be nonzero (that needs (bmax / 6) / g >= 2^-10, so bmax / 6 >=
// 2^-110), which the bracket's error bound assumes.
__device__ __forceinline__ ScaleBracket scale_bracket_for(float g) {
  if (!(g >= 0x1p-100f && g <= 0x1p100f)) return {};
  const float k = div_rn(kInverseE2M1Max, g);
  return {mul_rn(k, 1.0f - 0x1p-20f), mul_rn(k, 1.0f + 0x1p-20f)};
}

// NVFP4 with each block's element multiplier 1 / (dec(code) * g) looked up rather than divided:
// g is fixed per launch, so a CTA tabulates the 127 possible values once, with the very function
// Nvfp4Format::encode calls (same bits): a shared-memory load per block instead of a division
// (docs/performance.md, "Quantizer: loop and encoder").
// The block scale skips its two divisions where a bracket decides it (ScaleBracket).
struct Nvfp4TabulatedFormat {
  static constexpr int kBlock = kNvfp4Block;
  static constexpr int kCodes = 128;  // scale codes 0..0x7E (0x7F, NaN, is never looked up nor filled)
  Nvfp4Format format;
  const float* multipliers;  // [kCodes], shared memory
  ScaleBracket bracket{};    // off unless set (scale_bracket_for)

  __device__ __forceinline__ BlockEncoding encode(float block_max, bool block_is_finite) const {
    if (!block_is_finite || !nvfp4_global_scale_is_valid(format.global_scale)) return {kE4M3NaN, 0.0f, true};
    uint32_t code;
    if (!bracket.decides(block_max, &code)) code = format.scale_code(block_max);
    return {code, multipliers[code], false};
  }
};

// Fills a CTA's table of element multipliers (Nvfp4TabulatedFormat::kCodes floats, shared
// memory) for `format`; the caller synchronizes before the first lookup. Codes 0..0x7E only: no
// block is encoded with 0x7F (scale_code gives at most 0x7E; a NaN block returns before the
// lookup), and its entry, 1 / NaN, would take the division's slow path in one thread, which the
// whole CTA then waits for at the barrier.
__device__ __forceinline__ void tabulate_multipliers(const Nvfp4Format& format, float* table) {
  for (int code = threadIdx.x; code < kE4M3NaN; code += blockDim.x) {
    table[code] = format.element_multiplier(code);
  }
}

// A CTA's format for g, its multipliers tabulated in `table`. The caller synchronizes before the
// first lookup.
__device__ __forceinline__ Nvfp4TabulatedFormat tabulate_format(const Nvfp4Format& format, float* table) {
  tabulate_multipliers(format, table);
  return {format, table, scale_bracket_for(format.global_scale)};
}

// A CTA's format from `source`: g read (block 0 publishes it) and its multipliers tabulated in
// `table`. With `enabled` false (a recipe direction that is off) g = 1 is tabulated and nothing
// is read or published. The caller synchronizes before the first lookup.
__device__ __forceinline__ Nvfp4TabulatedFormat tabulate_source(const Nvfp4Source& source, float* table,
                                                                bool enabled = true) {
  Nvfp4Format format{1.0f};
  if (enabled) {
    format = source.make();
    source.publish(format);
  }
  return tabulate_format(format, table);
}

template <typename T, bool kAligned, class Source, class ScaleIndex>
__global__ void quantize_kernel(const T* __restrict__ x, int64_t num_chunks, Source source,
                                uint8_t* __restrict__ data, uint8_t* __restrict__ scales, ScaleIndex scale_index) {
  let_dependents_launch();
  prefetch_source(source);
  wait_for_primary_grid();  // a programmatic dependent (quantize.cu): the kernel before may write x or g
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  if constexpr (std::is_same_v<Source, Nvfp4Source>) {
    __shared__ float multipliers[Nvfp4TabulatedFormat::kCodes];
    const Nvfp4TabulatedFormat tabulated = tabulate_source(source, multipliers);
    __syncthreads();
    quantize_chunks<T, kAligned>(x, num_chunks, first, stride, tabulated, data, scales, scale_index);
  } else {
    const typename Source::Format format = source.make();
    quantize_chunks<T, kAligned>(x, num_chunks, first, stride, format, data, scales, scale_index);
  }
}

// Dynamic NVFP4 for small tensors in one launch: one thread block reduces the amax, derives g
// and quantizes (the second read hits L1/L2). Launch with exactly one block.
template <typename T, bool kAligned, class ScaleIndex>
__global__ void quantize_nvfp4_single_block_kernel(const T* __restrict__ x, int64_t num_chunks,
                                                   float* __restrict__ scale_out, uint8_t* __restrict__ data,
                                                   uint8_t* __restrict__ scales, ScaleIndex scale_index) {
  let_dependents_launch();
  wait_for_primary_grid();  // a programmatic dependent (quantize.cu): the kernel before may write x
  __shared__ uint32_t scratch[32];
  const int64_t numel = num_chunks * kElemsPer32Bytes<T>;
  const uint32_t amax_bits =
      block_reduce_max(thread_finite_max_bits<T, kAligned>(x, numel, threadIdx.x, blockDim.x), scratch);
  const Nvfp4Format format{nvfp4_global_scale_from_amax(__uint_as_float(amax_bits))};
  if (threadIdx.x == 0) *scale_out = format.global_scale;
  quantize_chunks<T, kAligned>(x, num_chunks, threadIdx.x, blockDim.x, format, data, scales, scale_index);
}

// NVFP4 with its own g in one launch of one thread-block cluster (compute capability 9.0 on), for
// inputs of at most kMaxClusterCtas CTAs of a chunk a thread: the single-block kernel's steps over
// the cluster's threads, the CTAs' maxima exchanged through shared memory (cluster_exchange.cuh)
// before any chunk is encoded. A max does not depend on the order, so this is the single-block
// kernel's g and its bytes, on up to 16 SMs instead of one.
constexpr int kClusterQuantizeMaxThreads = 1024;

template <typename T, bool kAligned, class ScaleIndex>
__global__ void __launch_bounds__(kClusterQuantizeMaxThreads) quantize_nvfp4_cluster_kernel(
    const T* __restrict__ x, int64_t num_chunks, float* __restrict__ scale_out, uint8_t* __restrict__ data,
    uint8_t* __restrict__ scales, ScaleIndex scale_index) {
  let_dependents_launch();
  wait_for_primary_grid();  // a programmatic dependent (quantize.cu): the kernel before may write x
  __shared__ uint32_t scratch[32];
  __shared__ ClusterExchange exchange;
  cluster_exchange_begin(exchange);
  const int64_t numel = num_chunks * kElemsPer32Bytes<T>;
  const int64_t thread = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t threads = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const uint32_t cta_max_bits = block_reduce_max(thread_finite_max_bits<T, kAligned>(x, numel, thread, threads), scratch);
  const uint32_t amax_bits = cluster_finite_max(cta_max_bits, exchange);
  const Nvfp4Format format{nvfp4_global_scale_from_amax(__uint_as_float(amax_bits))};
  if (thread == 0) *scale_out = format.global_scale;
  quantize_chunks<T, kAligned>(x, num_chunks, thread, threads, format, data, scales, scale_index);
}

}  // namespace fp4ops::cuda
