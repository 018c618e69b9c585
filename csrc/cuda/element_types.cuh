// Raw CUDA element types of the inputs and outputs, and exact conversions to and from fp32.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "../common/fp4_format.h"

namespace fp4ops::cuda {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// One round-to-nearest-even from fp32 (SPEC 2.6).
template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// Eight elements of T moved as whole 16-byte vectors (one for 2-byte types, two for fp32).
template <typename T>
struct alignas(16) Vec8 {
  T v[8];
};

template <typename T>
__device__ __forceinline__ Vec8<T> load_vec8_streaming(const T* p) {  // p 16-byte aligned
  Vec8<T> out;
  const uint4* src = reinterpret_cast<const uint4*>(p);
  uint4* dst = reinterpret_cast<uint4*>(&out);
#pragma unroll
  for (int i = 0; i < static_cast<int>(sizeof(Vec8<T>) / 16); ++i) dst[i] = __ldcs(src + i);
  return out;
}

template <typename T>
__device__ __forceinline__ void store_vec8(T* p, const Vec8<T>& value) {  // p 16-byte aligned
  const uint4* src = reinterpret_cast<const uint4*>(&value);
  uint4* dst = reinterpret_cast<uint4*>(p);
#pragma unroll
  for (int i = 0; i < static_cast<int>(sizeof(Vec8<T>) / 16); ++i) dst[i] = src[i];
}

}  // namespace fp4ops::cuda

namespace fp4ops::cuda {

// Eight consecutive elements starting at x + 8 * group, as stored. kAligned: x is 16-byte
// aligned, so whole-vector streaming loads; otherwise element loads (any storage offset).
template <typename T, bool kAligned>
__device__ __forceinline__ Vec8<T> load_vec8(const T* __restrict__ x, int64_t group) {
  if constexpr (kAligned) {
    return load_vec8_streaming(x + group * 8);
  } else {
    Vec8<T> raw;
#pragma unroll
    for (int j = 0; j < 8; ++j) raw.v[j] = x[group * 8 + j];
    return raw;
  }
}

// The 16 elements x[16 b .. 16 b + 15] (one NVFP4 block of a row), as stored: groups 2 b and
// 2 b + 1 (load_vec8's kAligned contract).
template <typename T, bool kAligned>
__device__ __forceinline__ void load_block16(const T* __restrict__ x, int64_t b, Vec8<T> (&raw)[2]) {
  raw[0] = load_vec8<T, kAligned>(x, 2 * b);
  raw[1] = load_vec8<T, kAligned>(x, 2 * b + 1);
}

// w & 0xFFFF0000 as two integer multiplies (w >> 16 as the high word of w * 2^16, then * 2^16):
// IMADs run on the FMA pipe, which the plain quantizer leaves mostly idle, where the mask would
// take the ALU pipe that bounds it (written in PTX so that the compiler does not fold it back
// into a mask). Only for kernels whose FMA pipe is idle: the recipe's Hadamard, 2D and
// stochastic-rounding kernels, whose FMA pipe is busier, keep the mask (chosen by measurement:
// docs/performance.md, "Quantizer: loop and encoder").
__device__ __forceinline__ uint32_t high_half_in_place(uint32_t w) {
  uint32_t out;
  asm("{\n\t.reg .u32 hi;\n\tmul.hi.u32 hi, %1, 65536;\n\tmul.lo.u32 %0, hi, 65536;\n\t}" : "=r"(out) : "r"(w));
  return out;
}

// Eight elements widened to fp32 (exact), into v[0..7]. bf16 pairs by bit operations: the low
// element shifted up, the high one masked in place: 2 instructions per pair, where the compiler's
// own widening moves the high half down and back up.
// kHighHalfOnFmaPipe: the high element by high_half_in_place instead of the mask.
template <typename T, bool kHighHalfOnFmaPipe = false>
__device__ __forceinline__ void widen8(const Vec8<T>& raw, float* v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const uint32_t* words = reinterpret_cast<const uint32_t*>(&raw);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      v[2 * j] = __uint_as_float(words[j] << 16);
      v[2 * j + 1] = __uint_as_float(kHighHalfOnFmaPipe ? high_half_in_place(words[j]) : words[j] & 0xFFFF0000u);
    }
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = to_float(raw.v[j]);
  }
}

// Two loaded groups of eight (16 elements, one NVFP4 block of 16-bit x) widened to fp32.
template <typename T>
__device__ __forceinline__ void widen16(const Vec8<T> (&raw)[2], float (&v)[16]) {
  widen8<T>(raw[0], v);
  widen8<T>(raw[1], v + 8);
}

// The same eight elements widened to fp32 (exact).
template <typename T, bool kAligned>
__device__ __forceinline__ void load_group8(const T* __restrict__ x, int64_t group, float (&v)[8]) {
  widen8<T>(load_vec8<T, kAligned>(x, group), v);
}

// The 32 bytes at x + 32 * chunk widened to fp32: 16 elements of bf16/fp16, 8 of fp32. Same
// kAligned contract as load_group8.
template <typename T>
constexpr int kElemsPer32Bytes = 32 / sizeof(T);

// 32 loaded bytes (two 16-byte vectors) widened to fp32: one or two groups of eight (widen8).
template <typename T>
__device__ __forceinline__ void widen_chunk32(const uint4 (&raw)[2], float (&v)[kElemsPer32Bytes<T>]) {
  const Vec8<T>* groups = reinterpret_cast<const Vec8<T>*>(raw);
#pragma unroll
  for (int i = 0; i < kElemsPer32Bytes<T> / 8; ++i) widen8<T>(groups[i], v + 8 * i);
}

template <typename T, bool kAligned>
__device__ __forceinline__ void load_chunk32(const T* __restrict__ x, int64_t chunk,
                                             float (&v)[kElemsPer32Bytes<T>]) {
  constexpr int kN = kElemsPer32Bytes<T>;
  const T* p = x + chunk * kN;
  if constexpr (kAligned) {
    const uint4* src = reinterpret_cast<const uint4*>(p);
    const uint4 raw[2] = {__ldcs(src), __ldcs(src + 1)};
    widen_chunk32<T>(raw, v);
  } else {
#pragma unroll
    for (int j = 0; j < kN; ++j) v[j] = to_float(p[j]);
  }
}

// max |v_j| as fp32 bits. Non-negative floats order like unsigned ints and NaN/Inf lie above
// every finite value, so a result >= kInfBits means the group holds a non-finite element, and
// otherwise it is exactly the finite max. The max is taken in fp32 with NaN propagation
// (max.NaN.f32, sm_80+: a NaN makes the result the canonical NaN 0x7FFFFFFF) on |v_j|, which the
// compiler folds into the instruction's operand modifier: one FMNMX per element, where the same
// max of the masked bits as unsigned ints needs a LOP3 per element and a 3-input integer max per
// two.
constexpr uint32_t kInfBits = 0x7F800000u;

__device__ __forceinline__ float max_nan(float a, float b) {
  float out;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(out) : "f"(a), "f"(b));
  return out;
}

template <int kN>
__device__ __forceinline__ uint32_t max_abs_bits(const float (&v)[kN]) {
  float m = fabsf(v[0]);
#pragma unroll
  for (int j = 1; j < kN; ++j) m = max_nan(m, fabsf(v[j]));
  return __float_as_uint(m);
}

// max_abs_bits of a block of 16-bit x taken on its loaded words, two elements per instruction:
// max.NaN.xorsign.abs on bf16x2 / f16x2 (FP4OPS_HW_MAX_ABS16, arch.h) keeps |max| per lane (its sign is the XOR of
// the inputs', dropped at the end) and propagates NaN, so 7 packed maxes and one fp32 max of the
// two lanes replace the 15 FMNMX of max_abs_bits on the widened values, on the ALU pipe that
// bounds the quantizers. Same bits: the max of 16-bit values is exact and widening is exact.
// Without that instruction (sm_80), the same bits from the widened values.
template <typename T>
__device__ __forceinline__ uint32_t max_abs_bits16(const Vec8<T> (&raw)[2]) {
  static_assert(sizeof(T) == 2, "two elements per 32-bit word");
#if !defined(FP4OPS_HW_MAX_ABS16)
  float v[16];
  widen16<T>(raw, v);
  return max_abs_bits(v);
#else
  const uint32_t* words = reinterpret_cast<const uint32_t*>(raw);
  uint32_t m = words[0];
#pragma unroll
  for (int j = 1; j < 8; ++j) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      asm("max.NaN.xorsign.abs.bf16x2 %0, %1, %2;" : "=r"(m) : "r"(m), "r"(words[j]));
    } else {
      asm("max.NaN.xorsign.abs.f16x2 %0, %1, %2;" : "=r"(m) : "r"(m), "r"(words[j]));
    }
  }
  const T* lanes = reinterpret_cast<const T*>(&m);
  return __float_as_uint(max_nan(fabsf(to_float(lanes[0])), fabsf(to_float(lanes[1]))));
#endif
}

// max_abs_bits of loaded groups of eight, as stored: on the words for 16-bit x (max_abs_bits16,
// a block of 16), on the values themselves for fp32 (widening fp32 is the identity).
template <typename T, int kGroups>
__device__ __forceinline__ uint32_t loaded_max_bits(const Vec8<T> (&raw)[kGroups]) {
  if constexpr (sizeof(T) == 2) {
    static_assert(kGroups == 2, "max_abs_bits16 takes one block of 16");
    return max_abs_bits16(raw);
  } else {
    static_assert(std::is_same_v<T, float>, "16-bit or fp32 x");
    return max_abs_bits(reinterpret_cast<const float(&)[8 * kGroups]>(raw));
  }
}

// Kernels that decode E2M1 codes into 16-byte output vectors (dequantize, cast from E2M1) take
// this many vectors ("units") per thread and step, with every unit's load issued first: a thread's
// next read is in flight while it decodes, not after its store (chosen by measurement:
// docs/performance.md, "Decoding kernels: units per step").
constexpr int kDecodeUnitsPerStep = 2;

// Steps (grid-stride work items) for `num_units` units: what the decoding launchers size grids by.
constexpr int64_t decode_steps(int64_t num_units) { return (num_units + kDecodeUnitsPerStep - 1) / kDecodeUnitsPerStep; }

// The code bytes behind one unit: 8 bf16/fp16 outputs from 4, 4 fp32 outputs from 2.
template <typename T>
constexpr int kCodeBytesPerUnit = 8 / sizeof(T);

// One unit: the kCodeBytesPerUnit<T> code bytes in `codes` (first byte lowest, element 2b in byte
// b's low nibble) decoded exactly, times `factor` with one rounding to T where kScaled
// (dequantize), as they are otherwise (the cast), in one 16-byte streaming store at `out`.
template <typename T, bool kScaled>
__device__ __forceinline__ void store_decoded_unit(T* out, uint32_t codes, float factor) {
  alignas(16) T y[2 * kCodeBytesPerUnit<T>];
#pragma unroll
  for (int b = 0; b < kCodeBytesPerUnit<T>; ++b) {
    const Float2 pair = e2m1x2_decode((codes >> (8 * b)) & 0xFFu);
    y[2 * b] = from_float<T>(kScaled ? mul_rn(pair.even, factor) : pair.even);
    y[2 * b + 1] = from_float<T>(kScaled ? mul_rn(pair.odd, factor) : pair.odd);
  }
  __stcs(reinterpret_cast<uint4*>(out), *reinterpret_cast<const uint4*>(y));
}

// Grid-stride loop over units [0, num_units), kUnits per thread and step. Unit j of a step sits j *
// blockDim.x units after the step's first, so a warp's units stay contiguous (its 16-byte stores
// fill 512 contiguous bytes). load(u) runs for every unit of the step before finish(u, loaded)
// runs for any: the step's reads are all in flight at once.
template <int kUnits, class Load, class Finish>
__device__ __forceinline__ void for_units_loads_first(int64_t num_units, const Load& load, const Finish& finish) {
  using Loaded = decltype(load(int64_t{0}));
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x * kUnits;
  for (int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x * kUnits + threadIdx.x; first < num_units;
       first += stride) {
    Loaded loaded[kUnits] = {};
#pragma unroll
    for (int j = 0; j < kUnits; ++j) {
      const int64_t u = first + static_cast<int64_t>(j) * blockDim.x;
      if (u < num_units) loaded[j] = load(u);
    }
#pragma unroll
    for (int j = 0; j < kUnits; ++j) {
      const int64_t u = first + static_cast<int64_t>(j) * blockDim.x;
      if (u < num_units) finish(u, loaded[j]);
    }
  }
}

}  // namespace fp4ops::cuda
