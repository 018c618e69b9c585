// SiLU-and-mul for few rows (a decode step): a thread per octet of y (8 outputs) instead of per
// output block. A block's kBlock / 8 octets sit on adjacent lanes of one warp, which combine their
// maxima with xor-shuffles, derive the same encoding and each encode their own octet, as the plain
// quantizer's lanes share a block (quantize_kernels.cuh). So a block's codes and scale are
// BlockQuantizer's bit for bit (the max does not depend on the order, and every octet is encoded
// with the block's encoding), at a quarter (MXFP4) or half (NVFP4) of each thread's dependent
// chain of exp, division and encoding: what bounds a grid too small to fill the GPU.
#pragma once

#include "cluster_exchange.cuh"
#include "producers_kernels.cuh"

namespace fp4ops::cuda {

constexpr int kOctet = 8;

// The gate and up elements of one octet of y, as loaded.
template <typename T>
struct SiluMulOctet {
  Vec8<T> gate, up;
};

// Octet `lane` (of kBlock / kOctet) of output block u.
template <int kBlock, typename T>
__device__ __forceinline__ SiluMulOctet<T> load_silu_mul_octet(const SiluMulArgs<T>& args, int64_t u, int lane) {
  const T* gate = silu_mul_gate_of_block<kBlock>(args, u) + lane * kOctet;
  return {load_vec8<T, true>(gate, 0), load_vec8<T, true>(gate + args.width, 0)};
}

// a / b as div_rn returns it, for 2^-30 <= |a| <= 2^64 and 1 <= b <= 2^64: __fdiv_rn's own fast
// sequence (an approximate reciprocal refined once, the quotient corrected once by its exact fma
// remainder), which __fdiv_rn returns wherever its range check passes. These ranges lie well inside
// that check: no quotient, remainder or correction comes near the subnormal or overflow range.
__device__ __forceinline__ float div_rn_in_range(float a, float b) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(b));
  const float refined = __fmaf_rn(r, __fmaf_rn(-b, r, 1.0f), r);
  const float q = __fmaf_rn(a, refined, 0.0f);
  return __fmaf_rn(refined, __fmaf_rn(-b, q, a), q);
}
__device__ __forceinline__ bool div_rn_is_in_range(float a, float b) {
  const float m = fabsf(a);
  return b >= 1.0f && b <= 0x1p64f && m >= 0x1p-30f && m <= 0x1p64f;  // false for NaN
}

// y of one octet, silu_mul's operations element by element. Its division (gate / (1 + e), where
// 1 + e >= 1) is div_rn_in_range, or the zero numerator itself (its sign kept: the denominator is
// 2), so the octet's eight chains interleave; __fdiv_rn's range check branches per element, which
// made them run one after another. An octet with any other element (a tiny or huge gate, a gate
// below -44 or not finite) is computed again with silu_mul itself: the same y either way.
template <typename T>
__device__ __forceinline__ void silu_mul_of_octet(const SiluMulOctet<T>& in, float (&y)[kOctet]) {
  float gate[kOctet], up[kOctet];
  widen8<T>(in.gate, gate);
  widen8<T>(in.up, up);
  bool in_range = true;
#pragma unroll
  for (int j = 0; j < kOctet; ++j) {
    const float denominator = add_rn(1.0f, expf(-gate[j]));
    const bool zero = gate[j] == 0.0f;
    in_range &= zero || div_rn_is_in_range(gate[j], denominator);
    y[j] = mul_rn(zero ? gate[j] : div_rn_in_range(gate[j], denominator), up[j]);
  }
  if (!in_range) {
#pragma unroll
    for (int j = 0; j < kOctet; ++j) y[j] = silu_mul(gate[j], up[j]);
  }
}

// BlockQuantizer split over a block's lanes: every lane of the warp calls put together (the
// shuffles), lanes [kBlock / 8 * b, kBlock / 8 * (b + 1)) holding the octets of one block;
// `store` is false for lanes that only take part in the shuffles (a whole block's lanes at once).
template <class ScaleIndex>
struct OctetQuantizer {
  uint8_t* __restrict__ data;
  uint8_t* __restrict__ scales;
  ScaleIndex scale_index;

  template <class Format>
  __device__ __forceinline__ void put(const Format& format, int64_t block, int lane, const float (&y)[kOctet],
                                      bool store) const {
    constexpr int kLanes = Format::kBlock / kOctet;
    uint32_t m = max_abs_bits(y);  // >= kInfBits: a NaN or Inf in the octet
#pragma unroll
    for (int offset = 1; offset < kLanes; offset <<= 1) m = max(m, __shfl_xor_sync(0xFFFFFFFFu, m, offset));
    const bool finite = m < kInfBits;
    const BlockEncoding enc = format.encode(finite ? __uint_as_float(m) : 0.0f, finite);
    const uint32_t word = encode_element_octet(enc, y);
    if (!store) return;
    __stcs(reinterpret_cast<uint32_t*>(data) + block * kLanes + lane, word);
    if (lane == 0) scales[scale_index.offset(block)] = static_cast<uint8_t>(enc.scale_code);
  }
};

// Octet o of y as (block, lane). Threads past the last octet take the last one and store nothing:
// the octet count is a whole number of blocks and every CTA a whole number of warps, so a block's
// lanes are all past the end or none is.
template <int kBlock>
struct OctetSlot {
  int64_t block;
  int lane;
  bool live;
};
template <int kBlock>
__device__ __forceinline__ OctetSlot<kBlock> octet_slot(int64_t o, int64_t num_octets) {
  constexpr int kLanes = kBlock / kOctet;
  const bool live = o < num_octets;
  const int64_t mine = live ? o : num_octets - 1;
  return {mine / kLanes, static_cast<int>(mine % kLanes), live};
}

template <int kBlock, typename T>
__device__ __forceinline__ void store_octet_intermediate(const SiluMulArgs<T>& args, const OctetSlot<kBlock>& slot,
                                                         const float (&y)[kOctet]) {
  if (slot.live && args.intermediate != nullptr) {
    store_intermediate<kOctet>(args.intermediate + slot.block * kBlock + slot.lane * kOctet, y);
  }
}

// A given NVFP4 global scale, or MXFP4: one octet a thread, the grid covering every octet. The
// octet's loads are issued before NVFP4's g is waited for (the format's table needs it).
template <typename T, class Source, class ScaleIndex>
__global__ void silu_mul_quantize_octets_kernel(SiluMulArgs<T> args, Source source, uint8_t* __restrict__ data,
                                                uint8_t* __restrict__ scales, ScaleIndex scale_index) {
  let_dependents_launch();
  prefetch_source(source);
  wait_for_inputs<Source>();
  constexpr int kBlock = decltype(make_format(source, nullptr))::kBlock;
  __shared__ float table[Nvfp4TabulatedFormat::kCodes];
  const int64_t num_octets = args.num_blocks * (kBlock / kOctet);
  const OctetSlot<kBlock> slot = octet_slot<kBlock>(static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x, num_octets);
  const auto read = read_source(source);
  const SiluMulOctet<T> in = load_silu_mul_octet<kBlock>(args, slot.block, slot.lane);
  const auto format = make_format(read, table);
  __syncthreads();  // the format's table
  float y[kOctet];
  silu_mul_of_octet(in, y);
  const OctetQuantizer<ScaleIndex> sink{data, scales, scale_index};
  sink.put(format, slot.block, slot.lane, y, slot.live);
  store_octet_intermediate(args, slot, y);
}

// NVFP4 with its own g in one launch of one thread-block cluster (compute capability 9.0 on): at
// most kMaxClusterCtas CTAs (beyond the portable 8 where the GPU schedules it, max_cluster_ctas)
// of kSiluClusterThreads to kSiluClusterMaxThreads threads, an octet of y a thread, y held in
// registers across the exchange (cluster_exchange.cuh). g follows from the amax as on every path.
constexpr int kSiluClusterThreads = 256, kSiluClusterMaxThreads = 512;

template <typename T, class ScaleIndex>
__global__ void __launch_bounds__(kSiluClusterMaxThreads) silu_mul_quantize_cluster_kernel(
    SiluMulArgs<T> args, float* __restrict__ g_out, uint8_t* __restrict__ data, uint8_t* __restrict__ scales,
    ScaleIndex scale_index) {
  let_dependents_launch();
  wait_for_primary_grid();
  constexpr int kBlock = kNvfp4Block;
  __shared__ float table[Nvfp4TabulatedFormat::kCodes];
  __shared__ uint32_t scratch[32];
  __shared__ ClusterExchange exchange;
  cluster_exchange_begin(exchange);
  const OctetSlot<kBlock> slot = octet_slot<kBlock>(static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x,
                                                    args.num_blocks * (kBlock / kOctet));
  float y[kOctet];
  silu_mul_of_octet(load_silu_mul_octet<kBlock>(args, slot.block, slot.lane), y);
  uint32_t max_bits = 0;
#pragma unroll
  for (int j = 0; j < kOctet; ++j) max_bits = max(max_bits, __float_as_uint(finite_abs(y[j])));
  const uint32_t all = cluster_finite_max(block_reduce_max(max_bits, scratch), exchange);
  const auto format = make_format(Nvfp4SourceRead{Nvfp4Source{nullptr, true, g_out}, __uint_as_float(all)}, table);
  __syncthreads();  // the format's table
  const OctetQuantizer<ScaleIndex> sink{data, scales, scale_index};
  sink.put(format, slot.block, slot.lane, y, slot.live);
  store_octet_intermediate(args, slot, y);
}

}  // namespace fp4ops::cuda
